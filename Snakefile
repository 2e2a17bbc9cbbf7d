# membench: reproduce, measure and compare memory-efficient GPU training methods.
# Wiring only: configuration, schema validation, the rule files, and the default target.

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

from membench import workflow_support
from membench.core.config import check_config, check_settings, load_schema
from membench.core.errors import InputError

min_version("8.20")


# The default config applies unless the user names config files (--configfile replaces it;
# --config alone adjusts it).
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


# One-line errors for bad keys and values, typed --config overrides; Snakemake's validate fills in
# the schema's defaults; then keys that name each other and the user data paths are checked, so
# that a bad config stops the run here, before any rule is read.
CONFIG_SOURCE = (
    ", ".join(map(str, workflow.overwrite_configfiles or ["config/config.yaml"]))
    + " and --config"
)
try:
    check_config(
        config,
        load_schema(workflow.source_path("config/schema.yaml")),
        source=CONFIG_SOURCE,
    )
    validate(config, "config/schema.yaml")
    check_settings(config, source=CONFIG_SOURCE)
except InputError as error:
    raise WorkflowError(f"membench: {error}") from None


report: "workflow/report/workflow.rst"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/meter.smk"
include: "rules/hotconv.smk"
include: "rules/division.smk"
include: "rules/appclass.smk"
include: "rules/robust.smk"
include: "rules/memnet.smk"
# Last: the report's pages cover the tables every rules file above added to the default target.
include: "rules/report.smk"


# A local run lets at most one GPU job per GPU present run at once (NVML and energy readings cover
# the whole device), unless the command line says otherwise (--resources gpu=N). Cluster runs get
# GPUs of their own from the scheduler.
if (
    workflow.is_main_process
    and workflow.resource_settings.nodes is None
    and "gpu" not in workflow.global_resources
):
    workflow.register_resource("gpu", workflow_support.local_gpu_slots())


rule all:
    default_target: True
    input:
        final_outputs(),
