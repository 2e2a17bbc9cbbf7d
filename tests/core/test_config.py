"""The config check: typed --config overrides and one-line errors naming the key."""

from pathlib import Path

import pytest
import yaml

from membench.core.config import check_config, coerce_overrides, load_schema
from membench.core.errors import InputError

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


@pytest.mark.parametrize("key, value, problem", [
    ("seed", 1e29, "1e+29 is greater than the maximum of 2147483647"),
    ("seed", 2**32, "4294967296 is greater than the maximum of 2147483647"),
    ("seed", float("nan"), "nan is not a finite number"),
    ("hotconv.batch_size", 2**40, "1099511627776 is greater than the maximum of 1048576"),
    ("meter.sample_interval_s", float("inf"), "inf is not a finite number"),
    ("robust.momentum", 1.5, "1.5 is greater than the maximum of 1"),
])
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
    with pytest.raises(InputError, match=rf"^the config, key 'hotconv.folds': a value of {len(text)} characters given "
                                         "as text; at most 65536 are read$"):
        check_config(config, SCHEMA)
    config["hotconv"] = {"folds": "[" * 30_000 + "]" * 30_000}  # too deep for YAML's parser: left as text
    with pytest.raises(InputError, match=r"key 'hotconv.folds': .* is not of type 'array'"):
        check_config(config, SCHEMA)
