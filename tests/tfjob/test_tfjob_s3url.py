"""The one reader of s3:// URLs (tfjob/s3url.py), and the checks built on it."""

from __future__ import annotations

import pickle

import pytest
from pydantic_core import PydanticCustomError

from tfjob.s3url import S3UrlError, is_valid_bucket_name, parse_s3_url, split_s3_url
from tfjob.tenants.policy import locate_in_s3
from tshell.s3_client import s3_destination


@pytest.mark.parametrize(
    ("url", "parts"),
    [
        ("s3://b/a/b.tar.gz", ("b", "a/b.tar.gz")),
        ("s3://bucket", ("bucket", "")),
        ("s3://bucket/", ("bucket", "")),
        ("s3:///key", ("", "key")),
        ("http://bucket/key", None),
        ("S3://bucket/key", None),
        (None, None),
        (42, None),
    ],
)
def test_an_s3_url_splits_into_bucket_and_key_and_anything_else_into_none(url, parts):
    assert split_s3_url(url) == parts


def test_a_parse_error_names_the_field_the_value_and_the_shape_and_survives_pickling():
    with pytest.raises(S3UrlError) as error:
        parse_s3_url("b/key", "output")
    assert str(error.value) == "output: 'b/key' given; expected s3://<bucket>/<key>"
    again = pickle.loads(pickle.dumps(error.value))
    assert (again.field, again.given, str(again)) == ("output", "b/key", str(error.value))
    with pytest.raises(
        ValueError,
        match=r"^destination: 's3:///k' given; the bucket name is "
        r"missing \(s3://bucket/prefix/ or s3://bucket/key\)$",
    ):
        s3_destination("s3:///k", "f.tar.gz")


@pytest.mark.parametrize(
    ("bucket", "valid"),
    [
        ("tfjob-demo", True),
        ("a.b-c", True),
        ("ab", False),
        ("Upper", False),
        ("a..b", False),
        ("-ab", False),
        ("x" * 64, False),
    ],
)
def test_bucket_names_follow_s3s_rules(bucket, valid):
    assert is_valid_bucket_name(bucket) is valid
    assert (locate_in_s3(f"s3://{bucket}/k") is not None) is valid


def test_a_destination_prefix_takes_the_file_name_and_a_key_stays():
    assert s3_destination("s3://b/bundles/", "x.tar.gz") == ("b", "bundles/x.tar.gz")
    assert s3_destination("s3://b", "x.tar.gz") == ("b", "x.tar.gz")
    assert s3_destination("s3://b/bundles/y.tar.gz", "x.tar.gz") == ("b", "bundles/y.tar.gz")


def test_a_requests_s3_url_needs_a_valid_bucket_and_a_key():
    from tfjob.request.checks import check_s3_url

    assert check_s3_url("s3://tfjob-demo/b.tar.gz", "s3://bucket/key") == ("tfjob-demo", "b.tar.gz")
    for url, problem in [
        ("http://x/y", "URL is allowed"),
        ("s3:///y", "valid bucket name"),
        ("s3://tfjob-demo/", "non-empty key"),
    ]:
        with pytest.raises(PydanticCustomError, match=problem):
            check_s3_url(url, "s3://bucket/key")


def test_tshell_makes_one_kind_of_s3_client_path_style_at_a_custom_endpoint(monkeypatch):
    from tshell.s3_client import make_s3_client

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("TSHELL_S3_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    client = make_s3_client()
    assert client.meta.endpoint_url == "http://127.0.0.1:1"
    assert client.meta.config.s3["addressing_style"] == "path"
    assert client.meta.config.signature_version == "s3v4"
