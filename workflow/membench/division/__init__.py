"""DIVISION: dual activation precision vs vanilla, ActNN-style 2-bit and checkpointing.

Modules: ``options`` (the methods', models' and precisions' names and the methods' settings),
``compress`` (the pure-torch compressors, the reference), ``kernels`` (choice between the
reference and the built C++/CUDA kernels), ``extension`` (build and load the kernels),
``functions`` (autograd Functions that save compressed activations), ``methods`` (model
conversion), ``models`` (ResNet-18/164, DenseNet-121, ResNet-50), ``train`` and ``bench`` (jobs'
algorithms), ``plots`` and ``commands`` (the ``membench division`` command line). ``options`` and
``plots`` do not import torch, so the plot jobs start without it.
"""
