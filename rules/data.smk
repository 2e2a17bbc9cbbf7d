# Data sets: BODMAS-shaped sets (generated, collected from this machine, or yours), their folds,
# statistics table and size figure; image sets (generated digits, your folder, CIFAR) as LMDBs.

BODMAS = config["bodmas"]["datasets"]
IMAGES = config["images"]["datasets"]
# A BODMAS set's metadata and binaries: the user's (source: directory), else made under
# results/data/bodmas/<name>, and then the binaries are a dependency.
BODMAS_DATA = {
    name: (
        {key: spec[key] for key in ("metadata", "binaries")}
        if spec["source"] == "directory"
        else {
            "metadata": f"results/data/bodmas/{name}/metadata.csv",
            "binaries": f"results/data/bodmas/{name}/binaries",
        }
    )
    for name, spec in BODMAS.items()
}
BODMAS_BINARIES_INPUT = {
    name: [] if spec["source"] == "directory" else BODMAS_DATA[name]["binaries"]
    for name, spec in BODMAS.items()
}
# Fold 0 is the time split, 1..k the stratified folds.
BODMAS_FOLD_FILES = [
    f"results/data/bodmas/{name}/folds/{split}_{name}_fold_{fold}.csv"
    for name, spec in BODMAS.items()
    for fold in range(spec["folds"] + 1)
    for split in ("train", "val", "test")
]
# An image set's folder: the user's (source: folder), else generated digits, a dependency.
IMAGE_FOLDERS = {
    name: (
        spec["root"]
        if spec["source"] == "folder"
        else f"results/data/images/{name}/folder"
    )
    for name, spec in IMAGES.items()
}
IMAGE_FOLDER_INPUT = {
    name: [] if spec["source"] == "folder" else IMAGE_FOLDERS[name]
    for name, spec in IMAGES.items()
}


wildcard_constraints:
    fold=r"\d+",
    image_dataset=alternatives(IMAGES),
    image_split=r"[A-Za-z0-9_-]+",


rule bodmas_synthetic:
    output:
        metadata="results/data/bodmas/{dataset}/metadata.csv",
        binaries=directory("results/data/bodmas/{dataset}/binaries"),
    log:
        log_path("bodmas_synthetic", "{dataset}"),
    benchmark:
        benchmark_path("bodmas_synthetic", "{dataset}")
    wildcard_constraints:
        dataset=alternatives(with_source(BODMAS, "synthetic")),
    conda:
        ENV
    resources:
        runtime=30,
    params:
        outdir=subpath(output.metadata, parent=True),
        options=lambda wildcards: workflow_support.bodmas_synthetic_options(
            BODMAS[wildcards.dataset], config["seed"]
        ),
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
        dataset=alternatives(with_source(BODMAS, "elf")),
    conda:
        ENV
    resources:
        runtime=30,
    params:
        outdir=subpath(output.metadata, parent=True),
        options=lambda wildcards: workflow_support.bodmas_elf_options(
            BODMAS[wildcards.dataset], config["seed"]
        ),
    shell:
        "membench bodmas elf --outdir {params.outdir:q} {params.options:q} > {log:q} 2>&1"


rule bodmas_fold:
    input:
        metadata=lambda wildcards: BODMAS_DATA[wildcards.dataset]["metadata"],
        binaries=lambda wildcards: BODMAS_BINARIES_INPUT[wildcards.dataset],
    output:
        train="results/data/bodmas/{dataset}/folds/train_{dataset}_fold_{fold}.csv",
        val="results/data/bodmas/{dataset}/folds/val_{dataset}_fold_{fold}.csv",
        test="results/data/bodmas/{dataset}/folds/test_{dataset}_fold_{fold}.csv",
    log:
        log_path("bodmas_fold", "{dataset}/{fold}"),
    benchmark:
        benchmark_path("bodmas_fold", "{dataset}/{fold}")
    wildcard_constraints:
        dataset=alternatives(BODMAS),
    conda:
        ENV
    resources:
        mem_mb=2000,
        runtime=60,
    params:
        binaries=lambda wildcards: BODMAS_DATA[wildcards.dataset]["binaries"],
        outdir=subpath(output.train, parent=True),
        options=lambda wildcards: workflow_support.bodmas_fold_options(
            BODMAS[wildcards.dataset], config["seed"]
        ),
    shell:
        "membench bodmas fold --metadata {input.metadata:q} --binaries {params.binaries:q}"
        " --dataset {wildcards.dataset:q} --fold {wildcards.fold:q}"
        " --outdir {params.outdir:q} {params.options:q} > {log:q} 2>&1"


rule bodmas_classes:
    input:
        metadata=lambda wildcards: BODMAS_DATA[wildcards.dataset]["metadata"],
    output:
        "results/data/bodmas/{dataset}/folds/classes.csv",
    log:
        log_path("bodmas_classes", "{dataset}"),
    benchmark:
        benchmark_path("bodmas_classes", "{dataset}")
    wildcard_constraints:
        dataset=alternatives(BODMAS),
    conda:
        ENV
    resources:
        runtime=10,
    params:
        label_mode=lambda wildcards: BODMAS[wildcards.dataset]["label_mode"],
        top_families=lambda wildcards: BODMAS[wildcards.dataset]["top_families"],
    shell:
        "membench bodmas classes --metadata {input.metadata:q} --out {output:q}"
        " --label-mode {params.label_mode:q} --top-families {params.top_families:q} > {log:q} 2>&1"


rule bodmas_table:
    input:
        folds=BODMAS_FOLD_FILES,
        classes=[f"results/data/bodmas/{name}/folds/classes.csv" for name in BODMAS],
    output:
        csv=report(
            "results/tables/datasets.csv",
            caption="../workflow/report/datasets.rst",
            category="Datasets",
            labels={"table": "dataset statistics"},
        ),
        parquet="results/tables/datasets.parquet",
    log:
        log_path("bodmas_table"),
    benchmark:
        benchmark_path("bodmas_table")
    localrule: True
    conda:
        ENV
    resources:
        runtime=10,
    shell:
        "membench bodmas stats --out {output.csv:q} {input.folds:q} > {log:q} 2>&1"


rule bodmas_plot_sizes:
    input:
        BODMAS_FOLD_FILES,
    output:
        report(
            "results/plots/bodmas_sizes.png",
            caption="../workflow/report/bodmas_sizes.rst",
            category="Datasets",
            labels={"figure": "BODMAS file sizes"},
        ),
    log:
        log_path("bodmas_plot_sizes"),
    benchmark:
        benchmark_path("bodmas_plot_sizes")
    localrule: True
    conda:
        ENV
    resources:
        runtime=10,
    shell:
        "membench bodmas plot-sizes --out {output:q} {input:q} > {log:q} 2>&1"


rule images_digits:
    output:
        # Only images_lmdb reads the generated images.
        temp(directory("results/data/images/{dataset}/folder")),
    log:
        log_path("images_digits", "{dataset}"),
    benchmark:
        benchmark_path("images_digits", "{dataset}")
    wildcard_constraints:
        dataset=alternatives(with_source(IMAGES, "digits")),
    conda:
        ENV
    resources:
        runtime=10,
    params:
        options=lambda wildcards: workflow_support.digits_options(
            IMAGES[wildcards.dataset], config["seed"]
        ),
    shell:
        "membench images digits --outdir {output:q} {params.options:q} > {log:q} 2>&1"


rule images_lmdb:
    input:
        lambda wildcards: IMAGE_FOLDER_INPUT[wildcards.dataset],
    output:
        directory("results/data/images/{dataset}/lmdb/{split}"),
    log:
        log_path("images_lmdb", "{dataset}/{split}"),
    benchmark:
        benchmark_path("images_lmdb", "{dataset}/{split}")
    wildcard_constraints:
        dataset=alternatives(with_source(IMAGES, "digits", "folder")),
    conda:
        ENV
    resources:
        mem_mb=2000,
        runtime=600,
    params:
        root=lambda wildcards: IMAGE_FOLDERS[wildcards.dataset],
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
        dataset=alternatives(with_source(IMAGES, "cifar10", "cifar100")),
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


if BODMAS:
    FINAL_OUTPUTS.extend(
        ["results/tables/datasets.csv", "results/plots/bodmas_sizes.png"]
    )
