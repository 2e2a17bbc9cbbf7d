# The report's landing summary and one readable page per aggregated table. Included after every
# system's rules file, so FINAL_OUTPUTS already lists every table of the run.

import json
import os
import shlex
import sys

from membench.report.headlines import headline_tables, load_headlines
from membench.report.views import TABLE_VIEWS

# Each system's headline declaration (what the summary shows and which published figures it
# judges), as paths from the checkout's root.
# The checkout's root from this file (rules/), not the running workflow's: the same where the
# workflow is a module of another.
REPORT_CHECKOUT = os.path.join(workflow.current_basedir, "..")
REPORT_HEADLINE_FILES = sorted(
    f"resources/headlines/{name}"
    for name in os.listdir(os.path.join(REPORT_CHECKOUT, "resources", "headlines"))
    if name.endswith(".yaml")
)
REPORT_HEADLINE_TABLES = headline_tables(
    load_headlines(
        [os.path.join(REPORT_CHECKOUT, path) for path in REPORT_HEADLINE_FILES]
    )
)
REPORT_TABLES = [
    os.path.basename(path).removesuffix(".csv")
    for path in FINAL_OUTPUTS
    if path.startswith("results/tables/")
    and path.endswith(".csv")
    and os.path.basename(path).removesuffix(".csv") in TABLE_VIEWS
]


wildcard_constraints:
    report_table=alternatives(REPORT_TABLES),


rule report_table_page:
    input:
        csv="results/tables/{report_table}.csv",
        parquet="results/tables/{report_table}.parquet",
    output:
        report(
            "results/report/tables/{report_table}.html",
            caption="../workflow/report/table_page.rst",
            category=lambda wildcards: TABLE_VIEWS[wildcards.report_table].category,
            labels={"table": "{report_table}", "view": "readable table"},
        ),
    log:
        log_path("report_table_page", "{report_table}"),
    benchmark:
        benchmark_path("report_table_page", "{report_table}")
    localrule: True
    conda:
        ENV
    resources:
        runtime=5,
    shell:
        "membench report table --name {wildcards.report_table:q} --csv {input.csv:q} --parquet {input.parquet:q}"
        " --out {output:q} > {log:q} 2>&1"


rule report_provenance:
    input:
        default_config=checkout_path("config/config.yaml"),
        schema=checkout_path("config/schema.yaml"),
    output:
        "results/report/provenance.json",
    log:
        log_path("report_provenance"),
    benchmark:
        benchmark_path("report_provenance")
    localrule: True
    conda:
        ENV
    resources:
        runtime=5,
    params:
        # The command line differs with every invocation (-n, --report, targets). A param derived
        # from the output is no rerun trigger, so the record names the command that last wrote it.
        command=lambda wildcards, output: shlex.join(["snakemake", *sys.argv[1:]]),
        config=json.dumps(config, sort_keys=True, default=str),
        # The checkout the default config comes from, as the input names it.
        checkout=lambda wildcards, input: os.path.normpath(
            os.path.join(os.path.dirname(input.default_config), "..")
        ),
    shell:
        "membench report provenance --command {params.command:q} --config-json {params.config:q}"
        " --default-config {input.default_config:q} --schema {input.schema:q}"
        " --checkout {params.checkout:q} --out {output:q} > {log:q} 2>&1"


rule report_summary:
    input:
        # The tables of this run the headlines read, and no other file that lies beside them.
        tables=[
            f"results/tables/{table}.csv"
            for table in REPORT_TABLES
            if table in REPORT_HEADLINE_TABLES
        ],
        headlines=[checkout_path(path) for path in REPORT_HEADLINE_FILES],
        provenance=rules.report_provenance.output[0],
    output:
        html=report(
            "results/report/summary.html",
            caption="../workflow/report/summary.rst",
            category="Summary",
            labels={"page": "verdicts, what each method costs, provenance"},
        ),
        fragment="results/report/summary_fragment.html",
        csv="results/report/summary.csv",
        verdicts=report(
            "results/report/verdicts.csv",
            caption="../workflow/report/summary.rst",
            category="Summary",
            labels={"page": "verdicts on the published figures (CSV)"},
        ),
    log:
        log_path("report_summary"),
    benchmark:
        benchmark_path("report_summary")
    localrule: True
    conda:
        ENV
    resources:
        runtime=5,
    params:
        tables=lambda wildcards, input: [
            word for path in input.tables for word in ("--table", path)
        ],
        headlines=lambda wildcards, input: [
            word for path in input.headlines for word in ("--headline", path)
        ],
    shell:
        "membench report summary {params.tables:q} {params.headlines:q}"
        " --provenance {input.provenance:q} --out-html {output.html:q} --out-fragment {output.fragment:q}"
        " --out-csv {output.csv:q} --out-verdicts {output.verdicts:q} > {log:q} 2>&1"


FINAL_OUTPUTS.append("results/report/summary.html")
FINAL_OUTPUTS.extend(f"results/report/tables/{table}.html" for table in REPORT_TABLES)
