"""The jobs of a dry run (`snakemake -n`), as the workflow profile has it print them: with their
shell commands. Imported by the tests of this directory as ``workflow.dry_run``."""

from __future__ import annotations

import re


def _value(text: str) -> object:
    return int(text) if re.fullmatch(r"-?\d+", text) else text


def parse_dry_run(output: str) -> list[dict]:
    """The jobs of a dry run's listing: rule, threads, resources, inputs, outputs, log, shell."""
    jobs: list[dict] = []
    for line in output.splitlines():
        header = re.match(r"^(?:local)?rule (\w+):$", line)
        if header:
            jobs.append(
                {
                    "rule": header.group(1),
                    "threads": 1,
                    "resources": {},
                    "input": [],
                    "output": [],
                    "log": [],
                    "shell": "",
                }
            )
            continue
        if not jobs:
            continue
        job = jobs[-1]
        field = re.match(r"^    (\w+): (.*)$", line)
        if field:
            key, text = field.groups()
            if key == "threads":
                job["threads"] = int(text)
            elif key == "resources":
                job["resources"] = {
                    k: _value(v) for k, v in (item.split("=", 1) for item in text.split(", "))
                }
            elif key in ("input", "output", "log"):
                job[key] = text.split(", ")
        elif line.startswith("Shell command: "):
            job["shell"] = line.removeprefix("Shell command: ")
    return jobs
