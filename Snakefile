# membench: reproduce, measure and compare memory-efficient GPU training methods.
# Wiring only: configuration, schema validation, the rule files, and the default target.

from snakemake.utils import min_version, validate

min_version("8.20")


# The default config applies unless the user names config files (--configfile replaces it;
# --config alone adjusts it).
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


validate(config, "config/schema.yaml")


report: "workflow/report/workflow.rst"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/meter.smk"
include: "rules/hotconv.smk"
include: "rules/build.smk"
include: "rules/division.smk"
include: "rules/report.smk"
include: "rules/appclass.smk"
include: "rules/memnet.smk"


check_dataset_paths()


rule all:
    default_target: True
    input:
        final_outputs(),
