"""Proxy settings: a bad batch setting is refused with the flag it came from."""

import pytest

from services.proxy.config import ProxyConfig


@pytest.mark.parametrize(
    ("setting", "value", "flag"),
    [
        ("batches_in_flight", 0, "--batches-in-flight"),
        ("batch_spacing_s", -0.001, "--batch-spacing-ms"),
        ("batch_spacing_s", 1.5, "--batch-spacing-ms"),
        ("batch_linger_s", -0.001, "--batch-linger-ms"),
        ("batch_linger_s", 1.5, "--batch-linger-ms"),
    ],
)
def test_a_bad_batch_setting_names_its_flag(setting, value, flag):
    with pytest.raises(ValueError, match=flag):
        ProxyConfig(**{setting: value})


def test_batches_linger_by_default_and_zero_turns_it_off():
    assert ProxyConfig().batch_linger_s == 0.016
    assert ProxyConfig(batch_linger_s=0).batch_linger_s == 0
