"""Application classification (seed 001): graph matching by loopy belief propagation.

A NumPy reference that reproduces the PNNL OpenMP output exactly and a fast torch version (CPU
threads and CUDA) behind one interface, :func:`membench.appclass.api.classify`.
"""
