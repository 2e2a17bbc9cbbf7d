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
