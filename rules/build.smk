# Extension builds: C++ kernels always, CUDA kernels where torch has CUDA and nvcc is present.


rule division_build:
    input:
        # The kernels' sources, so that editing them rebuilds (paths from the checkout, not the
        # working directory).
        sources=[
            f"{workflow.basedir}/workflow/membench/division/csrc/division_ops.cpp",
            f"{workflow.basedir}/workflow/membench/division/csrc/division_cuda.cu",
        ],
    output:
        manifest=DIVISION_BUILD_MANIFEST,
    params:
        cuda=DIVISION["cuda"],
    log:
        log_path("division_build"),
    benchmark:
        benchmark_path("division_build")
    threads: 2
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        ENV
    shell:
        "membench division build --outdir results/build/division --cuda {params.cuda} > {log} 2>&1"
