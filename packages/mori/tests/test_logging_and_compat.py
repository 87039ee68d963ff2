# SPDX-License-Identifier: MIT
"""MORI_GLOBAL_LOG_LEVEL / MORI_LOG_LEVEL set the ``mori`` logger; note_no_effect logs once."""

from __future__ import annotations

import logging

import pytest

from mori import _compat

_LEVEL = "import logging, mori; print(logging.getLevelName(logging.getLogger('mori').level))"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "NOTSET"),
        ({"MORI_GLOBAL_LOG_LEVEL": "debug"}, "DEBUG"),
        ({"MORI_GLOBAL_LOG_LEVEL": "WARN"}, "WARNING"),
        ({"MORI_GLOBAL_LOG_LEVEL": "trace"}, "DEBUG"),
        ({"MORI_GLOBAL_LOG_LEVEL": "debug", "MORI_LOG_LEVEL": "error"}, "ERROR"),  # ours wins
    ],
)
def test_log_level_variables_set_the_mori_logger(fresh_python, env, expected):
    done = fresh_python(_LEVEL, **env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


def test_an_invalid_level_is_a_typed_error_naming_variable_and_value(fresh_python):
    done = fresh_python("import mori", MORI_GLOBAL_LOG_LEVEL="loud")
    assert done.returncode != 0
    assert "LogLevelError" in done.stderr and "MORI_GLOBAL_LOG_LEVEL='loud'" in done.stderr


def test_note_no_effect_logs_once_per_setting(caplog):
    caplog.set_level(logging.INFO, logger="mori.compat")
    for _ in range(3):
        _compat.note_no_effect("TEST_ONLY_SETTING", 7, "nothing reads it")
    records = [r for r in caplog.records if "TEST_ONLY_SETTING" in r.getMessage()]
    assert len(records) == 1
    assert "7" in records[0].getMessage() and "nothing reads it" in records[0].getMessage()
    assert records[0].levelno == logging.INFO
    assert "TEST_ONLY_SETTING" in _compat.noted_settings()


def test_global_level_reaches_mori_io_and_its_native_core(fresh_python):
    # mori.io sets its logger and its native threshold together when an engine is made.
    done = fresh_python(
        "import logging, mori.io\n"
        "engine = mori.io.IOEngine('k', mori.io.IOEngineConfig(host='127.0.0.1', port=0))\n"
        "print(logging.getLevelName(logging.getLogger('mori.io').level))",
        MORI_GLOBAL_LOG_LEVEL="info",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "INFO"
