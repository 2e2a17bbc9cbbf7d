# DIVISION: image data as LMDBs, memory / throughput / largest-batch benchmarks of
# vanilla, DIVISION, ActNN-style 2-bit and checkpointing, accuracy runs, tables and figures.


rule images_digits:
    output:
        directory("results/data/images/{dataset}/folder"),
    log:
        log_path("images_digits", "{dataset}"),
    benchmark:
        benchmark_path("images_digits", "{dataset}")
    wildcard_constraints:
        dataset=alternatives(image_datasets("digits")),
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        options=lambda wildcards: digits_options(wildcards.dataset),
    shell:
        "membench images digits --outdir {output:q} {params.options:q} > {log:q} 2>&1"


rule images_lmdb:
    input:
        image_folder_input,
    output:
        directory("results/data/images/{dataset}/lmdb/{split}"),
    log:
        log_path("images_lmdb", "{dataset}/{split}"),
    benchmark:
        benchmark_path("images_lmdb", "{dataset}/{split}")
    wildcard_constraints:
        dataset=alternatives(image_datasets("digits") + image_datasets("folder")),
    conda:
        ENV
    resources:
        mem_mb=2000,
        runtime=600,
    params:
        root=lambda wildcards: image_folder(wildcards.dataset),
    shell:
        "membench images lmdb --root {params.root:q} --split {wildcards.split:q} --outdir {output:q} > {log:q} 2>&1"


rule images_cifar:
    output:
        directory("results/data/images/{dataset}/lmdb/{split}"),
    log:
        log_path("images_cifar", "{dataset}/{split}"),
    benchmark:
        benchmark_path("images_cifar", "{dataset}/{split}")
    wildcard_constraints:
        dataset=alternatives(image_datasets("cifar10") + image_datasets("cifar100")),
        split="train|test",
    conda:
        ENV
    resources:
        mem_mb=2000,
        runtime=60,
    params:
        root=lambda wildcards: IMAGES[wildcards.dataset]["root"],
        source=lambda wildcards: IMAGES[wildcards.dataset]["source"],
    shell:
        "membench images cifar --root {params.root:q} --source {params.source:q} --split {wildcards.split:q}"
        " --outdir {output:q} > {log:q} 2>&1"


rule division_memory:
    input:
        manifest=division_build_input(),
    output:
        metrics="results/division/memory/{division_model}/{division_method}/b{division_batch}/metrics.json",
        memlog="results/division/memory/{division_model}/{division_method}/b{division_batch}/memlog.csv",
    log:
        log_path(
            "division_memory", "{division_model}/{division_method}/b{division_batch}"
        ),
    benchmark:
        benchmark_path(
            "division_memory", "{division_model}/{division_method}/b{division_batch}"
        )
    # Before the timing jobs, which claim every core locally: points of one core then run in pairs.
    priority: 1
    conda:
        ENV
    # Memory figures are exact counts, not timings: two points may run side by side.
    threads: 1
    resources:
        mem_mb=division_job_mem_mb("memory"),
        runtime=60,
        gpu=gpu_count(),
    params:
        outdir=subpath(output.metrics, parent=True),
        options=division_job_options("memory"),
        trace=cli_options(
            {"trace_live_tensors": DIVISION["memory"]["trace_live_tensors"]}
        ),
        trace_allocator=trace_allocator_option(),
    shell:
        "membench division memory --outdir {params.outdir:q} --model {wildcards.division_model:q}"
        " --variant {wildcards.division_method:q} --batch-size {wildcards.division_batch:q}"
        " {params.trace:q} {params.trace_allocator:q} {params.options:q} > {log:q} 2>&1"


rule division_speed:
    input:
        manifest=division_build_input(),
    output:
        metrics="results/division/speed/{division_model}/{division_method}/b{division_batch}/metrics.json",
        memlog="results/division/speed/{division_model}/{division_method}/b{division_batch}/memlog.csv",
    log:
        log_path(
            "division_speed", "{division_model}/{division_method}/b{division_batch}"
        ),
    benchmark:
        benchmark_path(
            "division_speed", "{division_model}/{division_method}/b{division_batch}"
        )
    conda:
        ENV
    threads: 2
    resources:
        mem_mb=division_job_mem_mb("speed"),
        runtime=60,
        gpu=gpu_count(),
    params:
        outdir=subpath(output.metrics, parent=True),
        options=division_job_options("speed"),
        timing=cli_options(
            {k: DIVISION["speed"][k] for k in ("train_steps", "warmup_steps")}
        ),
    shell:
        "membench division speed --outdir {params.outdir:q} --model {wildcards.division_model:q}"
        " --variant {wildcards.division_method:q} --batch-size {wildcards.division_batch:q}"
        " {params.timing:q} {params.options:q} > {log:q} 2>&1"


rule division_max_batch:
    input:
        manifest=division_build_input(),
    output:
        metrics="results/division/max_batch/{division_model}/{division_method}/metrics.json",
        probes="results/division/max_batch/{division_model}/{division_method}/probes.csv",
    log:
        log_path("division_max_batch", "{division_model}/{division_method}"),
    benchmark:
        benchmark_path("division_max_batch", "{division_model}/{division_method}")
    conda:
        ENV
    threads: 2
    resources:
        mem_mb=8000,
        runtime=120,
        gpu=gpu_count(),
    params:
        outdir=subpath(output.metrics, parent=True),
        options=division_job_options("max_batch"),
        search=cli_options({k: DIVISION["max_batch"][k] for k in ("start", "limit")}),
    shell:
        "membench division maxbatch --outdir {params.outdir:q} --model {wildcards.division_model:q}"
        " --variant {wildcards.division_method:q} {params.search:q} {params.options:q} > {log:q} 2>&1"


rule division_train:
    input:
        unpack(division_accuracy_lmdbs),
        manifest=division_build_input(),
    output:
        metrics="results/division/accuracy/{image_dataset}/{division_model}/{division_method}/metrics.json",
        history="results/division/accuracy/{image_dataset}/{division_model}/{division_method}/history.csv",
    log:
        log_path("division_train", "{image_dataset}/{division_model}/{division_method}"),
    benchmark:
        benchmark_path(
            "division_train", "{image_dataset}/{division_model}/{division_method}"
        )
    conda:
        ENV
    threads: division_train_threads()
    resources:
        **division_train_resources(),
        mem_mb=4000,
        runtime=600,
    params:
        outdir=subpath(output.metrics, parent=True),
        options=division_train_options(),
        # Shell code that quotes its own values (workflow_support), so the command takes it as is.
        launcher=division_train_launcher(),
    shell:
        "{params.launcher} division train --outdir {params.outdir:q} --model {wildcards.division_model:q}"
        " --variant {wildcards.division_method:q} --dataset {wildcards.image_dataset:q}"
        " --train-lmdb {input.train:q} --val-lmdb {input.val:q} {params.options:q} > {log:q} 2>&1"


rule division_table:
    input:
        memory=division_benchmark_files("memory"),
        speed=division_benchmark_files("speed"),
        accuracy=division_accuracy_files(),
    output:
        memory=report(
            "results/tables/division_memory.csv",
            caption="../workflow/report/division_memory_table.rst",
            category="DIVISION",
            labels={"table": "memory per method and batch size"},
        ),
        speed=report(
            "results/tables/division_speed.csv",
            caption="../workflow/report/division_speed_table.rst",
            category="DIVISION",
            labels={"table": "throughput per method and batch size"},
        ),
        accuracy=report(
            "results/tables/division_accuracy.csv",
            caption="../workflow/report/division_accuracy.rst",
            category="DIVISION",
            labels={"table": "accuracy per method"},
        ),
        parquet=[
            "results/tables/division_memory.parquet",
            "results/tables/division_speed.parquet",
            "results/tables/division_accuracy.parquet",
        ],
    log:
        log_path("division_table"),
    benchmark:
        benchmark_path("division_table")
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "(membench table metrics --out {output.memory:q} {input.memory:q}"
        " && membench table metrics --out {output.speed:q} {input.speed:q}"
        " && membench table metrics --out {output.accuracy:q} {input.accuracy:q}) > {log:q} 2>&1"


rule division_max_batch_table:
    input:
        division_max_batch_files(),
    output:
        csv=report(
            "results/tables/division_max_batch.csv",
            caption="../workflow/report/division_max_batch.rst",
            category="DIVISION",
            labels={"table": "largest batch per method"},
        ),
        parquet="results/tables/division_max_batch.parquet",
    log:
        log_path("division_max_batch_table"),
    benchmark:
        benchmark_path("division_max_batch_table")
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "membench table metrics --out {output.csv:q} {input:q} > {log:q} 2>&1"


rule division_plot_memory:
    input:
        rules.division_table.output.memory,
    output:
        report(
            "results/plots/division_memory.png",
            caption="../workflow/report/division_memory.rst",
            category="DIVISION",
            labels={"figure": "memory against batch size"},
        ),
    log:
        log_path("division_plot_memory"),
    benchmark:
        benchmark_path("division_plot_memory")
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "membench division plot-memory --table {input:q} --out {output:q} > {log:q} 2>&1"


rule division_plot_speed:
    input:
        rules.division_table.output.speed,
    output:
        report(
            "results/plots/division_speed.png",
            caption="../workflow/report/division_speed.rst",
            category="DIVISION",
            labels={"figure": "throughput against batch size"},
        ),
    log:
        log_path("division_plot_speed"),
    benchmark:
        benchmark_path("division_plot_speed")
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "membench division plot-speed --table {input:q} --out {output:q} > {log:q} 2>&1"


if DIVISION_METHODS:
    FINAL_OUTPUTS.extend(
        [
            "results/tables/division_memory.csv",
            "results/tables/division_speed.csv",
            "results/tables/division_accuracy.csv",
            "results/plots/division_memory.png",
            "results/plots/division_speed.png",
        ]
    )
if DIVISION_METHODS and DIVISION["max_batch"]["enabled"]:
    FINAL_OUTPUTS.append("results/tables/division_max_batch.csv")
