"""The config check: typed --config overrides and one-line errors naming the key."""

from pathlib import Path

import pytest
import yaml

from membench.core.config import check_config, check_settings, coerce_overrides, dataset_paths, load_schema
from membench.core.errors import InputError

# The GPU acceptance machine runs the test suite without Snakemake (.ci/gpu-acceptance).
validate = pytest.importorskip("snakemake.utils").validate

REPO = Path(__file__).resolve().parents[2]
SCHEMA = load_schema(REPO / "config" / "schema.yaml")


def default_config():
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def test_default_config_passes():
    check_config(default_config(), SCHEMA)


def test_nested_override_strings_take_the_schema_types():
    config = default_config()
    config["hotconv"]["epochs"] = "3"
    config["hotconv"]["learning_rate"] = "0.5"
    config["meter"]["trace_live_tensors"] = "false"
    config["hotconv"]["sweep"]["batch_sizes"] = "[2, 8]"
    check_config(config, SCHEMA)
    assert config["hotconv"]["epochs"] == 3
    assert config["hotconv"]["learning_rate"] == 0.5
    assert config["meter"]["trace_live_tensors"] is False
    assert config["hotconv"]["sweep"]["batch_sizes"] == [2, 8]


def test_strings_stay_strings_where_the_schema_asks_for_one():
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}}
    assert coerce_overrides({"name": "3", "n": "3"}, schema) == {"name": "3", "n": 3}


def test_a_string_that_is_not_of_the_type_is_left_for_the_error():
    config = default_config()
    config["hotconv"]["epochs"] = "three"
    with pytest.raises(InputError) as error:
        check_config(config, SCHEMA, source="my.yaml")
    message = str(error.value)
    assert message.startswith("my.yaml, key 'hotconv.epochs': ")
    assert "'three' is not of type 'integer'" in message
    assert "\n" not in message


def test_misspelt_key_names_the_closest_valid_one():
    config = default_config()
    config["devcie"] = "cpu"
    with pytest.raises(InputError) as error:
        check_config(config, SCHEMA)
    message = str(error.value)
    assert "key 'devcie'" in message and "did you mean 'device'?" in message
    assert "\n" not in message


def test_misspelt_nested_key_names_its_full_path():
    config = default_config()
    config["hotconv"]["epochz"] = 3
    with pytest.raises(InputError, match=r"key 'hotconv\.epochz'.*did you mean 'epochs'\?"):
        check_config(config, SCHEMA)


def test_a_large_bad_value_is_shortened():
    config = default_config()
    config["hotconv"]["variants"] = "x" * 500
    with pytest.raises(InputError) as error:
        check_config(config, SCHEMA)
    assert len(str(error.value)) < 300


@pytest.mark.parametrize(
    "key, value, problem",
    [
        ("seed", 1e29, "1e+29 is greater than the maximum of 2147483647"),
        ("seed", 2**32, "4294967296 is greater than the maximum of 2147483647"),
        ("seed", float("nan"), "nan is not a finite number"),
        ("hotconv.batch_size", 2**40, "1099511627776 is greater than the maximum of 1048576"),
        ("meter.sample_interval_s", float("inf"), "inf is not a finite number"),
        ("robust.momentum", 1.5, "1.5 is greater than the maximum of 1"),
    ],
)
def test_a_number_out_of_its_range_is_one_line_naming_the_key(key, value, problem):
    config = default_config()
    *parents, last = key.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    with pytest.raises(InputError) as error:
        check_config(config, SCHEMA, source="my.yaml")
    assert str(error.value) == f"my.yaml, key '{key}': {problem}"


@pytest.mark.timeout(10)
def test_a_long_text_override_is_refused_before_it_is_parsed():
    config = default_config()
    text = "[" + ", ".join(["1"] * 5_000_000) + "]"
    config["hotconv"] = {"folds": text}
    with pytest.raises(
        InputError,
        match=rf"^the config, key 'hotconv.folds': a value of {len(text)} characters given "
        "as text; at most 65536 are read$",
    ):
        check_config(config, SCHEMA)
    config["hotconv"] = {"folds": "[" * 30_000 + "]" * 30_000}  # too deep for YAML's parser: left as text
    with pytest.raises(InputError, match=r"key 'hotconv.folds': .* is not of type 'array'"):
        check_config(config, SCHEMA)


# -- keys that name each other, and user data paths (check_settings) ---------------------------------


def completed(config: dict) -> dict:
    """``config`` checked and completed with the schema's defaults, as the Snakefile has it."""
    check_config(config, SCHEMA)
    validate(config, str(REPO / "config" / "schema.yaml"))
    return config


def test_default_settings_pass_and_paper_settings_miss_only_their_data():
    check_settings(completed(default_config()))
    for path in sorted((REPO / "config" / "paper").glob("*.yaml")):
        with pytest.raises(
            InputError, match=r"^paper\.yaml: \d+ dataset path\(s\) named in the config do not exist: "
        ):
            check_settings(completed(yaml.safe_load(path.read_text())), source="paper.yaml")


@pytest.mark.parametrize(
    "change, key, problem",
    [
        (
            {
                "appclass": {
                    "variants": [
                        {"implementation": "reference", "device": "cpu", "threads": 2, "precision": "float64"}
                    ]
                }
            },
            "appclass.variants.0",
            "the reference runs as {'implementation': 'reference', 'device': 'cpu', 'threads': 1, "
            "'precision': 'float64'} only, not {'implementation': 'reference', 'device': 'cpu', "
            "'threads': 2, 'precision': 'float64', 'kernels': 'auto'}",
        ),
        (
            {
                "appclass": {
                    "variants": [
                        {"implementation": "torch", "device": "cpu", "threads": 2, "precision": "float32"},
                        {"implementation": "torch", "device": "cpu", "threads": 2, "precision": "float64"},
                        {
                            "implementation": "torch",
                            "device": "cpu",
                            "threads": 2,
                            "precision": "float32",
                            "kernels": "auto",
                        },
                    ]
                }
            },
            "appclass.variants.2",
            "repeats appclass.variants.0 ({'implementation': 'torch', 'device': 'cpu', 'threads': 2, "
            "'precision': 'float32', 'kernels': 'auto'})",
        ),
        (
            {"hotconv": {"datasets": ["tiny", "mine"]}},
            "hotconv.datasets",
            "mine not among bodmas.datasets (tiny)",
        ),
        (
            {"division": {"accuracy": {"dataset": "cifar"}}},
            "division.accuracy.dataset",
            "'cifar' is not one of images.datasets (digits)",
        ),
        (
            {"division": {"accuracy": {"variants": ["checkpoint"]}}},
            "division.accuracy.variants",
            "checkpoint not in division.variants (vanilla, division)",
        ),
        (
            {"robust": {"nodes": 2}},
            "robust.nodes",
            "runs span several nodes only with robust.transport: distributed",
        ),
        (
            {"robust": {"nodes": 3, "transport": "distributed", "producers": [1, 4]}},
            "robust.nodes",
            "3 nodes need at least as many ranks, but a run with P = 1 producers has 2",
        ),
        ({"robust": {"dataset": "mnist"}}, "robust.root", "dataset mnist needs the directory of its files"),
        (
            {"memnet": {"published": {"measured_mlp": {"path": "x.csv", "family": "mlp"}}}},
            "memnet.published",
            "measured_mlp is the name of a measured dataset; rename it",
        ),
        (
            {"memnet": {"published": {"gpumemnet_mlp": {"path": "x.csv", "family": "mlp"}}}},
            "memnet.published",
            "gpumemnet_mlp is the name of a shipped dataset (memnet.shipped); rename it",
        ),
    ],
)
def test_a_key_that_names_what_the_config_lacks_is_one_line(change, key, problem):
    config = default_config()
    config["bodmas"]["datasets"] = {"tiny": {"source": "synthetic"}}
    config["hotconv"]["datasets"] = ["tiny"]
    config["images"]["datasets"] = {"digits": {"source": "digits"}}
    config["division"]["variants"] = ["vanilla", "division"]
    config["division"]["accuracy"] |= {"dataset": "digits", "variants": None}
    for section, values in change.items():
        for name, value in values.items():
            old = config[section].get(name)
            config[section][name] = (
                {**old, **value} if isinstance(old, dict) and isinstance(value, dict) else value
            )
    with pytest.raises(InputError) as error:
        check_settings(completed(config), source="my.yaml")
    assert str(error.value) == f"my.yaml, key '{key}': {problem}"


def test_the_accuracy_keys_are_not_checked_when_division_measures_nothing():
    config = default_config()
    config["division"] = {"variants": [], "accuracy": {"dataset": "nowhere", "variants": ["checkpoint"]}}
    check_settings(completed(config))


def test_missing_user_data_is_listed_in_one_line(tmp_path):
    present = tmp_path / "metadata.csv"
    present.touch()
    config = default_config()
    config["bodmas"]["datasets"]["own"] = {
        "source": "directory",
        "metadata": str(present),
        "binaries": str(tmp_path / "binaries"),
    }
    config["images"]["datasets"]["own"] = {"source": "folder", "root": str(tmp_path / "images")}
    config["memnet"]["published"] = {"own_mlp": {"path": str(tmp_path / "mlp.csv"), "family": "mlp"}}
    config = completed(config)
    assert ("bodmas.datasets.own.metadata", str(present)) in dataset_paths(config)
    with pytest.raises(InputError) as error:
        check_settings(config, source="my.yaml")
    assert str(error.value) == (
        f"my.yaml: 3 dataset path(s) named in the config do not exist: bodmas.datasets.own.binaries: "
        f"{tmp_path / 'binaries'}, images.datasets.own.root: {tmp_path / 'images'}, "
        "memnet.published.own_mlp.path: "
        f"{tmp_path / 'mlp.csv'}; point these keys at your copies of the data (see config/README.md)"
    )


def test_every_user_data_key_of_the_schema_is_a_dataset_path():
    config = default_config()
    config["bodmas"]["datasets"] = {"b": {"source": "directory", "metadata": "m", "binaries": "d"}}
    config["appclass"]["graphs"] = {"g": {"source": "files", "vertices": "gv", "edges": "ge"}}
    config["appclass"]["patterns"] = {"p": {"source": "files", "vertices": "pv", "edges": "pe"}}
    config["images"]["datasets"] = {
        "f": {"source": "folder", "root": "f"},
        "c": {"source": "cifar10", "root": "c"},
    }
    config["robust"] |= {"dataset": "mnist", "root": "r"}
    config["memnet"]["published"] = {"n": {"path": "n.csv", "family": "mlp"}}
    assert dict(dataset_paths(completed(config))) == {
        "bodmas.datasets.b.metadata": "m",
        "bodmas.datasets.b.binaries": "d",
        "appclass.graphs.g.vertices": "gv",
        "appclass.graphs.g.edges": "ge",
        "appclass.patterns.p.vertices": "pv",
        "appclass.patterns.p.edges": "pe",
        "images.datasets.f.root": "f",
        "images.datasets.c.root": "c",
        "robust.root": "r",
        "memnet.published.n.path": "n.csv",
    }
