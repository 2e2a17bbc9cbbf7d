# Dataset preparation: BODMAS-shaped sets (generated, collected from this machine, or yours),
# their folds, and the dataset-statistics table.


rule bodmas_synthetic:
    output:
        metadata="results/data/bodmas/{dataset}/metadata.csv",
        binaries=directory("results/data/bodmas/{dataset}/binaries"),
    log:
        log_path("bodmas_synthetic", "{dataset}"),
    benchmark:
        benchmark_path("bodmas_synthetic", "{dataset}")
    wildcard_constraints:
        dataset=alternatives(bodmas_datasets("synthetic")),
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=30,
    params:
        outdir=subpath(output.metadata, parent=True),
        options=lambda wildcards: bodmas_synthetic_options(wildcards.dataset),
    shell:
        "membench bodmas synthetic --outdir {params.outdir:q} {params.options:q} > {log:q} 2>&1"


rule bodmas_elf:
    output:
        metadata="results/data/bodmas/{dataset}/metadata.csv",
        binaries=directory("results/data/bodmas/{dataset}/binaries"),
    log:
        log_path("bodmas_elf", "{dataset}"),
    benchmark:
        benchmark_path("bodmas_elf", "{dataset}")
    wildcard_constraints:
        dataset=alternatives(bodmas_datasets("elf")),
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=30,
    params:
        outdir=subpath(output.metadata, parent=True),
        options=lambda wildcards: bodmas_elf_options(wildcards.dataset),
    shell:
        "membench bodmas elf --outdir {params.outdir:q} {params.options:q} > {log:q} 2>&1"


rule bodmas_fold:
    input:
        metadata=bodmas_metadata,
        binaries=bodmas_binaries_input,
    output:
        train="results/data/bodmas/{dataset}/folds/train_{dataset}_fold_{fold}.csv",
        val="results/data/bodmas/{dataset}/folds/val_{dataset}_fold_{fold}.csv",
        test="results/data/bodmas/{dataset}/folds/test_{dataset}_fold_{fold}.csv",
    log:
        log_path("bodmas_fold", "{dataset}/{fold}"),
    benchmark:
        benchmark_path("bodmas_fold", "{dataset}/{fold}")
    wildcard_constraints:
        dataset=alternatives(bodmas_datasets()),
    conda:
        ENV
    resources:
        mem_mb=2000,
        runtime=60,
    params:
        binaries=lambda wildcards: bodmas_binaries(wildcards.dataset),
        outdir=subpath(output.train, parent=True),
        options=lambda wildcards: bodmas_fold_options(wildcards.dataset),
    shell:
        "membench bodmas fold --metadata {input.metadata:q} --binaries {params.binaries:q}"
        " --dataset {wildcards.dataset:q} --fold {wildcards.fold:q}"
        " --outdir {params.outdir:q} {params.options:q} > {log:q} 2>&1"


rule bodmas_classes:
    input:
        metadata=bodmas_metadata,
    output:
        "results/data/bodmas/{dataset}/folds/classes.csv",
    log:
        log_path("bodmas_classes", "{dataset}"),
    benchmark:
        benchmark_path("bodmas_classes", "{dataset}")
    wildcard_constraints:
        dataset=alternatives(bodmas_datasets()),
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        label_mode=lambda wildcards: BODMAS[wildcards.dataset]["label_mode"],
        top_families=lambda wildcards: BODMAS[wildcards.dataset]["top_families"],
    shell:
        "membench bodmas classes --metadata {input.metadata:q} --out {output:q}"
        " --label-mode {params.label_mode:q} --top-families {params.top_families:q} > {log:q} 2>&1"


rule dataset_table:
    input:
        folds=bodmas_all_fold_files(),
        classes=[f"{bodmas_dir(d)}/folds/classes.csv" for d in bodmas_datasets()],
    output:
        csv=report(
            "results/tables/datasets.csv",
            caption="../workflow/report/datasets.rst",
            category="Datasets",
            labels={"table": "dataset statistics"},
        ),
        parquet="results/tables/datasets.parquet",
    log:
        log_path("dataset_table"),
    benchmark:
        benchmark_path("dataset_table")
    localrule: True
    conda:
        ENV
    resources:
        mem_mb=1000,
        runtime=10,
    shell:
        "membench bodmas stats --out {output.csv:q} {input.folds:q} > {log:q} 2>&1"


if bodmas_datasets():
    FINAL_OUTPUTS.append("results/tables/datasets.csv")
