"""store.records (``store.speedups.frozen_dataclass``) builds frozen records exactly as
``dataclasses.dataclass(frozen=True)`` would, on the running Python.

Each record class of the store is compared with its twin built by dataclasses from the same
body: signature, docstring, fields and params, repr, equality, hash, frozenness, match args,
``asdict``/``replace``/``fields``/``astuple``, copies and pickles.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from store import records
from store.host.processes import ProcessObservation, ProcessRecord, StopOutcome
from store.journal.core import AggregateRow, Change, Event, Outcome, Stored
from store.journal.url import JournalURL
from store.model.execution import ClaimResult, CommandResult
from store.model.goal import CorruptGoal, Goal
from store.model.goals import GoalResult
from store.model.run import Attempt, Run
from store.model.run_rules import ExecutionLimits
from store.ops.evidence import CleanupEvidence, Target
from store.ops.operator import ActionReport
from store.ops.reads import GoalAndRun

RECORDS = [
    Event, Stored, Change, Outcome, AggregateRow, ExecutionLimits, Attempt, Run, CommandResult,
    ClaimResult, Goal, CorruptGoal, GoalResult, GoalAndRun, ProcessRecord, ProcessObservation,
    StopOutcome, CleanupEvidence, Target, ActionReport, JournalURL,
]  # fmt: skip


def _source_twin(cls: type) -> type:
    """The class as dataclasses alone would have built it from the same body."""
    own = {
        name: value
        for name, value in vars(cls).items()
        if name not in ("__dict__", "__weakref__", "__record_fields__", "__match_args__")
        and not name.startswith("__dataclass")
        and name not in ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")
    }
    if own.get("__doc__", "").startswith(cls.__name__ + "("):
        own["__doc__"] = None  # dataclasses writes it
    bases = tuple(_source_twin(b) if b in RECORDS else b for b in cls.__bases__)
    return dataclasses.dataclass(frozen=True)(type(cls.__name__, bases, own))


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_a_record_is_what_dataclasses_makes(cls: type) -> None:
    assert "__record_fields__" in vars(cls)  # built here, not handed to dataclasses
    twin = _source_twin(cls)
    assert str(inspect.signature(cls)) == str(inspect.signature(twin))
    assert cls.__init__.__annotations__ == twin.__init__.__annotations__  # type: ignore[misc]
    assert cls.__doc__ == twin.__doc__
    assert cls.__match_args__ == twin.__match_args__  # type: ignore[attr-defined]
    assert dataclasses.is_dataclass(cls)
    mine, theirs = dataclasses.fields(cls), dataclasses.fields(twin)
    assert [(f.name, f.type, f.default, f.init, f.repr, f.kw_only) for f in mine] == [
        (f.name, f.type, f.default, f.init, f.repr, f.kw_only) for f in theirs
    ]
    assert repr(cls.__dataclass_params__) == repr(twin.__dataclass_params__)  # type: ignore[attr-defined]
    for name in ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__"):
        assert getattr(cls, name).__qualname__ == f"{cls.__qualname__}.{name}"


@records.dataclass(frozen=True)
class _Point:
    x: int
    y: float = 0.5
    tags: tuple[str, ...] = ()


@records.dataclass(frozen=True)
class _Point3(_Point):
    z: Any = None


_Twin: Any = dataclasses.dataclass(frozen=True)(
    type("_Point", (), {"__annotations__": {"x": "int", "y": "float", "tags": "tuple[str, ...]"},
                        "y": 0.5, "tags": (), "__module__": __name__, "__qualname__": "_Point"})
)  # fmt: skip


def test_instances_behave_alike() -> None:
    for a, b in [(_Point(1), _Twin(1)), (_Point(2, math.nan, ("t",)), _Twin(2, math.nan, ("t",)))]:
        assert repr(a) == repr(b)
        assert hash(a) == hash(b)
        assert (a == a) == (b == b)  # the same nan object: equal, as tuples compare
        for again in (copy.copy, copy.deepcopy):
            assert (a == again(a)) == (b == again(b))  # a fresh nan: unequal, in both
            assert repr(again(a)) == repr(a)
        assert repr(pickle.loads(pickle.dumps(a))) == repr(a)  # (the twin is not importable)
        assert dataclasses.asdict(a) == dataclasses.asdict(b)
        assert dataclasses.astuple(a) == dataclasses.astuple(b)
        replaced = dataclasses.replace(a, x=9) == _Point(9, a.y, a.tags)
        assert replaced == (dataclasses.replace(b, x=9) == _Twin(9, b.y, b.tags))
        assert replaced or math.isnan(a.y)  # nan: as the running Python's dataclasses say
    assert _Point(1) == pickle.loads(pickle.dumps(_Point(1)))
    assert _Point(1) != _Twin(1) and _Point(1) != (1, 0.5, ())
    assert _Point(1).__eq__(_Point3(1)) is NotImplemented
    assert _Point3(1, z=3) == _Point3(1, 0.5, (), 3) and _Point3(1) != _Point3(1, z=4)
    assert repr(_Point3(1)) == "_Point3(x=1, y=0.5, tags=(), z=None)"
    assert [f.name for f in dataclasses.fields(_Point3)] == ["x", "y", "tags", "z"]
    match _Point(4, 5.0):
        case _Point(x, y):
            assert (x, y) == (4, 5.0)


@pytest.mark.parametrize("cls", [_Point, _Twin])
def test_mistakes_fail_alike(cls: Any) -> None:
    point = cls(1)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'x'"):
        point.x = 2
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'other'"):
        point.other = 2
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'y'"):
        del point.y
    with pytest.raises(TypeError, match=r"missing 1 required positional argument: 'x'"):
        cls()
    with pytest.raises(TypeError, match="unexpected keyword argument 'w'"):
        cls(1, w=2)


def test_replace_is_dataclasses_replace() -> None:
    point = _Point3(1, 2.0, ("a",), z="z")
    assert records.replace(point, y=3.0) == dataclasses.replace(point, y=3.0)
    assert records.replace(point) == point and records.replace(point) is not point
    with pytest.raises(TypeError, match="unexpected keyword argument 'w'"):
        records.replace(point, w=1)
    twin = _Twin(1)
    assert records.replace(twin, x=2) == dataclasses.replace(twin, x=2)


def test_what_it_does_not_cover_goes_to_dataclasses() -> None:
    with pytest.raises(ValueError, match="mutable default"):

        @records.dataclass(frozen=True)
        class _Listed:
            items: list[int] = []  # noqa: RUF012

    with pytest.raises(TypeError, match="non-default argument"):

        @records.dataclass(frozen=True)
        class _Ordered:
            a: int = 0
            b: int  # type: ignore[misc]

    @records.dataclass(frozen=True)
    class _Later:
        a: int

        def __post_init__(self) -> None:
            object.__setattr__(self, "a", self.a + 1)

    assert _Later.__record_fields__ is None and _Later(1).a == 2  # type: ignore[attr-defined]

    @records.dataclass(frozen=True)
    class _After(_Later):
        b: int = 0

    assert (
        _After(1, 2) == _After(1, 2) and _After(1).a == 2 and records.replace(_After(1), b=3).b == 3
    )

    @records.dataclass
    class _Open:
        a: int

    box = _Open(1)
    box.a = 2
    assert _Open.__record_fields__ is None and box == _Open(2)  # type: ignore[attr-defined]


def test_the_store_builds_its_records_without_dataclasses_or_inspect() -> None:
    probe = (
        "import sys, store.ops.operator, store.model.goals, store.journal.sqlite;"
        " print(sorted({'dataclasses', 'inspect'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_a_field_a_class_attribute_intercepts_is_set_as_dataclasses_sets_it() -> None:
    """A record's ``__init__`` stores fields into the instance's ``__dict__`` directly only when
    nothing of the class intercepts the name: a slot of a base is still filled as a slot."""

    class Slotted:
        __slots__ = ("__dict__", "x")

    @records.dataclass(frozen=True)
    class Record(Slotted):
        x: int
        y: int = 2

    assert vars(Record)["__record_fields__"] is not None  # built here
    made = Record(1)
    assert (made.x, made.y) == (1, 2) and "x" not in vars(made)
    twin = dataclasses.dataclass(frozen=True)(
        type("Record", (Slotted,), {"__annotations__": {"x": "int", "y": "int"}, "y": 2})
    )
    assert vars(twin(1)) == vars(made)


def test_a_records_init_is_compiled_when_the_record_is_first_built() -> None:
    """A command imports many records and builds few: only those pay for compiling."""

    @records.dataclass(frozen=True)
    class Lazy:
        a: int
        b: str = "b"

    class Plain(Lazy):  # not a record: it inherits the record's __init__
        pass

    assert not inspect.isfunction(vars(Lazy)["__init__"])
    assert Plain(1) == Plain(1, "b")  # built through the subclass first
    assert inspect.isfunction(vars(Lazy)["__init__"])
    assert "__init__" not in vars(Plain)
    assert (
        Lazy.__init__.__qualname__
        == "test_a_records_init_is_compiled_when_the_record_is_first_built.<locals>.Lazy.__init__"
    )
    with pytest.raises(TypeError, match=r"missing 1 required positional argument: 'a'"):
        Lazy()  # type: ignore[call-arg]


# Builds two records in a fresh interpreter and counts the compiles of a record's __init__ (the
# audit sees every compile: a module's source without bytecode, the standard library's own).
COMPILES = """
import sys
seen = []
def audit(event, args):
    source = args[0] if event == "compile" else b""  # the text as UTF-8 bytes
    if isinstance(source, bytes) and source.startswith(b"def __create_fn__("):
        seen.append(1)
sys.addaudithook(audit)
from store.journal.core import Event
from store.model.run_rules import EXECUTION_LIMITS  # built at import
Event(1, "goal:g", 1, "made", {}, 0.0)
print(len(seen))
"""


def compiles(env: dict[str, str], *flags: str) -> int:
    done = subprocess.run(
        [sys.executable, *flags, "-c", COMPILES], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_a_records_init_is_compiled_once_per_interpreter_not_once_per_run(tmp_path: Path) -> None:
    """Kept beside the bytecode as the interpreter keeps its own, read by every later run."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path / "pyc")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    assert compiles(env) == 2
    [kept] = (tmp_path / "pyc").rglob("frozen_dataclass.*.inits")
    assert compiles(env) == 0
    kept.write_bytes(kept.read_bytes()[:-7])  # cut short: read as no file at all
    assert compiles(env) == 2
    assert compiles(env) == 0  # written whole again
    kept.write_bytes(b"refine record inits 2.7.18\n" + kept.read_bytes().partition(b"\n")[2])
    assert compiles(env) == 2  # another interpreter's code objects are not taken


def test_without_bytecode_files_nothing_is_written(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path / "pyc")}
    assert compiles(env, "-B") == 2
    assert compiles(env, "-B") == 2
    assert list(tmp_path.rglob("*.inits")) == []
