"""HotConv: MalConv, MalConv2, HotConv and HotConv-Eco trained and measured side by side.

``models``: the one architecture and the four ways of computing its temporal max-pool;
``data``: raw-byte batches; ``train``: the training job; ``bench``: the memory sweep;
``plots``: report figures; ``commands``: ``membench hotconv train|bench|plot|plot-sweep``.
"""
