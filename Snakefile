# membench: reproduce, measure and compare memory-efficient GPU training methods.
# Wiring only: configuration, schema validation, the rule files, and the default target.

from snakemake.utils import min_version, validate

min_version("8.20")


configfile: "config/config.yaml"


validate(config, "config/schema.yaml")


report: "workflow/report/workflow.rst"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/meter.smk"
include: "rules/build.smk"
include: "rules/division.smk"
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        final_outputs(),
