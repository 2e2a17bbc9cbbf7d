# Extension builds: C++ kernels always, CUDA kernels where torch has CUDA and nvcc is present.


rule division_build:
    input:
        # The kernels' sources, so that editing them rebuilds (paths from this checkout, also
        # when the workflow is used as a module of another).
        sources=[
            workflow.source_path(
                "../workflow/membench/division/csrc/division_ops.cpp"
            ),
            workflow.source_path(
                "../workflow/membench/division/csrc/division_cuda.cu"
            ),
        ],
    output:
        manifest=DIVISION_BUILD_MANIFEST,
    log:
        log_path("division_build"),
    benchmark:
        benchmark_path("division_build")
    # Start first: the jobs of a whole system wait for it, and it compiles on one core.
    priority: 2
    conda:
        ENV
    # One compiler process (the CUDA source compiles beside it only where CUDA is built).
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
        # Built where the GPU jobs run, so that torch sees the GPU's architecture.
        gpu=division_build_gpus(),
    params:
        cuda=DIVISION["cuda"],
    shell:
        "membench division build --outdir results/build/division --cuda {params.cuda:q} > {log:q} 2>&1"
