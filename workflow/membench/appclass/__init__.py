"""Application classification: graph matching by loopy belief propagation.

A NumPy reference that reproduces the PNNL OpenMP output exactly (the readable specification), and
the fast version behind one interface, :func:`membench.appclass.api.classify`: C++ kernels with
OpenMP on the CPU (:mod:`membench.appclass.native`, printing the reference's bytes) where
``membench appclass build`` has compiled them, pure torch on CUDA and where there is no build.
"""
