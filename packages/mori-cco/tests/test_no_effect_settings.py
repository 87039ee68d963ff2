# SPDX-License-Identifier: MIT
"""CCODevCommRequirements fields accepted for compatibility with no effect: each is logged once
at INFO (mori._compat.note_no_effect) when set, and the dev comm comes out the same as with the
defaults. Runs one rank on the cpu backend, in this process, so caplog sees the log."""

from __future__ import annotations

import dataclasses
import logging

import pytest

import mori.cco
from mori import _compat
from mori.cco.communicator import NO_EFFECT_REQUIREMENTS, NO_EFFECT_VARIABLES
from mori.cco.layout import DevComm

#: A value other than the default for each no-effect field.
NON_DEFAULT = {
    "gda_connection_type": mori.cco.GDA_CONNECTION_RAIL,
    "gda_context_count": 8,
    "gda_queue_depth": 256,
    "gda_traffic_class": 106,
    "rail_gda_barrier_count": 4,
    "barrier_count": 2,
}
#: What the dev comm may differ in: where its resource window was allocated, and the echoed type.
ALLOWED_TO_DIFFER = {"resource", "gda_connection_type"}


@pytest.fixture
def fresh_notes(monkeypatch: pytest.MonkeyPatch) -> None:
    """note_no_effect logs once per process: give this test a process-fresh memory of it."""
    monkeypatch.setattr(_compat, "_noted", set())


@pytest.fixture
def comm():
    with mori.cco.Communicator.init(1, 0, mori.cco.get_unique_id(), 64 << 20, backend="cpu") as communicator:
        yield communicator


def _layout(handle: mori.cco.DevCommHandle) -> dict[str, object]:
    dc = handle.struct
    out: dict[str, object] = {name: getattr(dc, name) for name, _ in DevComm._fields_ if name not in ALLOWED_TO_DIFFER}
    out["resource.size"] = int(dc.resource.size)
    return out


def test_the_table_lists_every_no_effect_field() -> None:
    assert set(NON_DEFAULT) == set(NO_EFFECT_REQUIREMENTS)
    defaults = mori.cco.CCODevCommRequirements()
    for name, value in NON_DEFAULT.items():
        assert getattr(defaults, name) != value, name


def test_no_effect_fields_are_logged_once_and_change_nothing(comm, fresh_notes, caplog) -> None:
    caplog.set_level(logging.INFO, logger="mori.compat")
    base = mori.cco.CCODevCommRequirements(lsa_barrier_count=2, gda_signal_count=3, gda_counter_count=1)
    reference = comm.create_dev_comm(base)
    assert not [r for r in caplog.records if "CCODevCommRequirements" in r.getMessage()]

    changed = dataclasses.replace(base, **NON_DEFAULT)
    handles = [comm.create_dev_comm(changed) for _ in range(2)]  # the second call must not log again
    for handle in handles:
        assert _layout(handle) == _layout(reference)
        assert handle.struct.gda_connection_type == mori.cco.GDA_CONNECTION_RAIL
    for name, value in NON_DEFAULT.items():
        lines = [r for r in caplog.records if f"CCODevCommRequirements.{name}=" in r.getMessage()]
        assert len(lines) == 1, (name, [r.getMessage() for r in lines])
        assert lines[0].levelno == logging.INFO
        assert repr(value) in lines[0].getMessage() and NO_EFFECT_REQUIREMENTS[name] in lines[0].getMessage()
    for handle in [reference, *handles]:
        comm.destroy_dev_comm(handle)


def test_unknown_connection_type_is_a_typed_error(comm) -> None:
    with pytest.raises(mori.cco.CcoInvalidArgumentError, match=r"gda_connection_type=7 is not one of"):
        comm.create_dev_comm(mori.cco.CCODevCommRequirements(gda_connection_type=7))


def test_mori_enable_sdma_is_logged_once_and_changes_nothing(fresh_notes, caplog, monkeypatch) -> None:
    caplog.set_level(logging.INFO, logger="mori.compat")
    layouts = []
    for value in ("0", "1", "1"):
        monkeypatch.setenv("MORI_ENABLE_SDMA", value)
        with mori.cco.Communicator.init(1, 0, mori.cco.get_unique_id(), 64 << 20, backend="cpu") as comm:
            handle = comm.create_dev_comm()
            layouts.append(_layout(handle))
            comm.destroy_dev_comm(handle)
    assert layouts[0] == layouts[1] == layouts[2]
    lines = [r for r in caplog.records if r.getMessage().startswith("MORI_ENABLE_SDMA=")]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert NO_EFFECT_VARIABLES["MORI_ENABLE_SDMA"] in lines[0].getMessage()


@pytest.mark.parametrize(
    ("env", "queues"),
    [({}, 2), ({"MORI_SDMA_NUM_CHANNELS": "3"}, 3), ({"MORI_SDMA_NUM_CHANNELS": "3", "MORI_CCO_CE_QUEUES": "5"}, 5)],
)
def test_mori_sdma_num_channels_sets_the_copy_engine_queues(comm, monkeypatch, env, queues) -> None:
    """MORI's MORI_SDMA_NUM_CHANNELS takes effect: copy-engine queues per peer when a dev comm asks
    for 0 and MORI_CCO_CE_QUEUES is not set."""
    monkeypatch.delenv("MORI_CCO_CE_QUEUES", raising=False)
    monkeypatch.delenv("MORI_SDMA_NUM_CHANNELS", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    handle = comm.create_dev_comm()
    assert handle.struct.ce_queue_count == queues
    comm.destroy_dev_comm(handle)


@pytest.mark.parametrize(("variable", "value"), [("MORI_CCO_FABRIC_LENIENT", "1"), ("MORI_CCO_BC", "/tmp/cco.bc")])
def test_mori_fabric_lenient_and_bitcode_are_logged_once(fresh_notes, caplog, monkeypatch, variable, value) -> None:
    """MORI's MORI_CCO_FABRIC_LENIENT and MORI_CCO_BC are accepted with no effect: logged once at
    INFO when set, and the communicator comes out the same."""
    caplog.set_level(logging.INFO, logger="mori.compat")
    layouts = []
    for setting in (None, value, value):
        if setting is None:
            monkeypatch.delenv(variable, raising=False)
        else:
            monkeypatch.setenv(variable, setting)
        with mori.cco.Communicator.init(1, 0, mori.cco.get_unique_id(), 64 << 20, backend="cpu") as comm:
            handle = comm.create_dev_comm()
            layouts.append((comm.lsa_size, comm.num_nodes, _layout(handle)))
            comm.destroy_dev_comm(handle)
    assert layouts[0] == layouts[1] == layouts[2]
    lines = [r for r in caplog.records if r.getMessage().startswith(f"{variable}=")]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO, [r.getMessage() for r in lines]
    assert NO_EFFECT_VARIABLES[variable] in lines[0].getMessage()
