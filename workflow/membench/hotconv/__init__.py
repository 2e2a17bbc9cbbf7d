"""HotConv: MalConv, MalConv2, HotConv and HotConv-Eco trained and measured side by side.

``options``: the variants' names; ``models``: the one architecture and the four ways of computing
its temporal max-pool; ``data``: raw-byte batches; ``train``: the training job; ``bench``: the
memory sweep's points; ``tables``: the sweep's table; ``plots``: report figures; ``commands``:
``membench hotconv train|bench|sweep-table|plot|plot-sweep``. ``options``, ``tables`` and ``plots``
do not import torch, so the table and plot jobs start without it.
"""
