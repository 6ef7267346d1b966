"""The request's size caps: refused before the request is read or expanded, naming the field."""

import time

import pytest
import yaml

from harness.tfjob_fixtures import valid_request_data
from tfjob.request.checks import MAX_REQUEST_BYTES
from tfjob.request.model import RequestError, TrainingRequest, load_request, parse_request


def test_a_request_file_over_the_cap_is_refused_from_its_size_before_it_is_read(tmp_path):
    path = tmp_path / "huge.yaml"
    with path.open("wb") as handle:  # sparse: reading it would take 4 GiB of memory
        handle.truncate(4 * 1024**3)
    with pytest.raises(RequestError) as caught:
        load_request(path)
    assert str(caught.value) == (
        "request: 4294967296 bytes of text given; at most 262144 bytes are allowed "
        "for a whole request"
    )


def test_request_text_over_the_cap_is_refused_before_it_is_parsed():
    text = "name: digits\n" + "# padding\n" * (MAX_REQUEST_BYTES // 10)
    with pytest.raises(RequestError) as caught:
        parse_request(text, "yaml")
    assert caught.value.field == ""
    assert "bytes of text given" in str(caught.value)


def test_a_yaml_alias_bomb_is_refused_without_expanding_it():
    lines = ['a0: &a0 ["xxxxxxxxxxxxxxxx"]']
    for level in range(1, 40):
        previous = f"*a{level - 1}"
        lines.append(f"a{level}: &a{level} [{', '.join([previous] * 4)}]")
    data = valid_request_data(args=["--x"])
    text = yaml.safe_dump(data) + "\n".join(lines) + "\n"
    started = time.monotonic()
    with pytest.raises(RequestError) as caught:
        parse_request(text, "yaml")
    assert time.monotonic() - started < 2.0
    assert "or more as JSON given" in str(caught.value)


def test_a_request_just_under_every_cap_loads():
    env = {f"V{i}": "x" * 800 for i in range(256)}
    request = load_request(valid_request_data(env=env, args=["y" * 32768]))
    assert len(request.env) == 256 and len(request.args[0]) == 32768


def test_the_model_itself_holds_the_env_and_args_caps():
    data = valid_request_data(env={"BIG": "x" * 40000})
    with pytest.raises(Exception) as caught:
        TrainingRequest.model_validate(data)
    assert "at most 32768 bytes are allowed in one environment value" in str(caught.value)
