"""``@dataclass(frozen=True)`` as dataclasses makes it, at a fraction of its start-up cost.

dataclasses compiles six methods per class and imports ``inspect``: the ≈ 20 records a `refine`
command loads cost ≈ 8 ms plus ≈ 3 ms, a third of Python's own start-up (DESIGN §9, CLI
start-up). Here a frozen record gets the same ``__init__`` (same signature, one compile, made
when the record is first built: a command builds few of the records it imports), and
``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``/``__delattr__`` (FrozenInstanceError),
``__match_args__`` and docstring as dataclasses would give it, without compiling them. It is
still a dataclass: ``__dataclass_fields__`` and ``__dataclass_params__`` are made by dataclasses
itself, from a twin class, the first time something asks (``fields``, ``asdict``, ``replace``,
``is_dataclass``). A class this does not cover (``field()``, ``ClassVar``, ``__post_init__``,
its own dunder methods, an unhashable default, …) or a non-frozen one goes to dataclasses.

Justified by ``bench/cli.py`` (CLI start-up). Measured in issue 28, every record handed to
dataclasses instead, CPU medians of 20 interleaved runs on a loaded machine (bare Python 39 ms):
`refine goals` 81 → 106 ms, `show` 81 → 100, `stop` 88 → 117, `cancel` 96 → 122. Compared with
the running Python's dataclasses (3.11, 3.12, 3.13: ``__eq__`` follows 3.13's field-by-field
comparison) in ``tests/unit/test_speedups_frozen_dataclass.py``.
"""

from __future__ import annotations

import atexit
import marshal
import os
import reprlib
import sys
from collections.abc import Callable
from pathlib import Path
from types import CodeType
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")

_MISSING = object()
# A class whose body defines one of these goes to dataclasses, which has rules for each.
_OWN = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")
_OTHER = ("__post_init__", "__slots__", "__dataclass_fields__", "__dataclass_params__")
_KINDS = ("ClassVar", "InitVar", "KW_ONLY")


@overload
def dataclass(cls: type[T], /) -> type[T]: ...
@overload
def dataclass(*, frozen: bool = False) -> Callable[[type[T]], type[T]]: ...
@dataclass_transform()
def dataclass(cls: type[T] | None = None, /, *, frozen: bool = False) -> Any:
    """``dataclasses.dataclass``; frozen records are built here (see the module's note)."""

    def wrap(c: type[T]) -> type[T]:
        fields = _covered(c) if frozen else None
        if fields is None:
            import dataclasses

            made = dataclasses.dataclass(c, frozen=frozen)
            made.__record_fields__ = None  # type: ignore[attr-defined]  # not a base's
            return made
        return _build(c, fields)

    return wrap if cls is None else wrap(cls)


def replace(obj: T, /, **changes: Any) -> T:
    """``dataclasses.replace``: a record built here is copied without importing dataclasses."""
    fields = getattr(type(obj), "__record_fields__", None)
    if fields is None:
        import dataclasses

        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    kept = {name: getattr(obj, name) for name in fields if name not in changes}
    return obj.__class__(**kept, **changes)


def _covered(cls: type) -> dict[str, tuple[str, Any]] | None:
    """Every field as ``name: (annotation, default)``, bases' first; None: not covered."""
    if any(name in cls.__dict__ for name in _OWN + _OTHER):
        return None
    fields: dict[str, tuple[str, Any]] = {}
    for base in reversed(cls.__mro__[1:]):
        if base.__dict__.get("__record_fields__") is not None:
            fields.update(base.__dict__["__record_fields__"])
        elif "__dataclass_fields__" in base.__dict__:
            return None  # a base made by dataclasses: let it check and merge
    for name, annotation in _annotations(cls).items():
        default = cls.__dict__.get(name, _MISSING)
        if not isinstance(annotation, str) or annotation.split(".")[-1].startswith(_KINDS):
            return None
        if default is not _MISSING and type(default).__hash__ is None:
            return None  # dataclasses refuses a mutable default
        if type(default).__module__ == "dataclasses":
            return None  # field(), KW_ONLY
        fields[name] = (annotation, default)
    has_default = [default is not _MISSING for _, default in fields.values()]
    if has_default != sorted(has_default):
        return None  # a field without a default after one with: dataclasses refuses it
    return fields


def _annotations(cls: type) -> dict[str, Any]:
    """The class's own annotations, as dataclasses reads them (inspect is what we avoid)."""
    return dict(cls.__dict__.get("__annotations__", {}))  # noqa: RUF063


def _build(cls: type[T], fields: dict[str, tuple[str, Any]]) -> type[T]:
    names = tuple(fields)
    methods: dict[str, Callable[..., Any]] = {
        "__repr__": _repr(names),
        "__eq__": _eq(names),
        "__hash__": _hash(names),
        "__setattr__": _setattr(cls, names),
        "__delattr__": _delattr(cls, names),
    }
    for name, method in methods.items():
        method.__qualname__ = f"{cls.__qualname__}.{name}"
    attributes: dict[str, Any] = {
        "__init__": _LazyInit(cls, fields),
        **methods,
        "__record_fields__": fields,
        "__dataclass_fields__": _Twin("__dataclass_fields__"),
        "__dataclass_params__": _Twin("__dataclass_params__"),
    }
    if "__match_args__" not in cls.__dict__:
        attributes["__match_args__"] = names
    if not cls.__doc__:  # as dataclasses writes it: the class's signature
        attributes["__doc__"] = cls.__name__ + _signature(fields)
    for name, value in attributes.items():
        setattr(cls, name, value)
    return cls


def _signature(fields: dict[str, tuple[str, Any]]) -> str:
    """``inspect.signature``'s text for the class, as dataclasses puts it in the docstring."""
    params = [
        f"{name}: {annotation!r}" + ("" if default is _MISSING else f" = {default!r}")
        for name, (annotation, default) in fields.items()
    ]
    return f"({', '.join(params)})"


class _LazyInit:
    """A record's ``__init__`` until the class is first called or asked for it: then compiled
    (the one compile a record costs) and put in its place. A command builds few of the records
    it imports, so it compiles few of them (DESIGN §9, CLI start-up)."""

    def __init__(self, record: type, fields: dict[str, tuple[str, Any]]) -> None:
        self.record, self.fields = record, fields

    def __get__(self, obj: object, owner: type) -> Any:
        # Not found through ``owner``: 3.13's inspect asks with the class as ``obj`` and its
        # metaclass as ``owner``; a subclass that is not a record asks with itself.
        record = self.record
        init = _init(record, self.fields)
        init.__qualname__ = f"{record.__qualname__}.__init__"
        record.__init__ = init  # type: ignore[misc]  # the class itself, not an instance
        return init.__get__(obj, owner)


def _init(cls: type, fields: dict[str, tuple[str, Any]]) -> Callable[..., None]:
    """The one compiled method: dataclasses' signature, so its errors are the same. Its body
    stores the fields in the instance's ``__dict__`` directly (what ``object.__setattr__`` does
    for a name no class attribute intercepts, ≈ 4× faster a field) unless a class attribute
    would: a slot or another data descriptor, then it is dataclasses' own body."""
    params, body = [], []
    closure: dict[str, Any] = {"__dataclass_builtins_object__": object}
    direct = _plain_attributes(cls, fields)
    if direct and fields:
        body.append(
            "  __dataclass_dict__=__dataclass_builtins_object__.__getattribute__(self,'__dict__')"
        )
    for name, (annotation, default) in fields.items():
        closure[f"__dataclass_type_{name}__"] = annotation
        param = f"{name}:__dataclass_type_{name}__"
        if default is not _MISSING:
            closure[f"__dataclass_dflt_{name}__"] = default
            param += f"=__dataclass_dflt_{name}__"
        params.append(param)
        if direct:
            body.append(f"  __dataclass_dict__[{name!r}]={name}")
        else:
            body.append(f"  __dataclass_builtins_object__.__setattr__(self,{name!r},{name})")
    closure["__dataclass_return_type__"] = None
    text = (
        f"def __create_fn__({', '.join(closure)}):\n"
        f" def __init__(self{''.join(', ' + p for p in params)})"
        f"->__dataclass_return_type__:\n" + ("\n".join(body) or "  pass") + "\n return __init__"
    )
    module = sys.modules.get(cls.__module__)
    namespace: dict[str, Any] = {}
    exec(_compiled(text), module.__dict__ if module else {}, namespace)
    init: Callable[..., None] = namespace["__create_fn__"](**closure)
    return init


def _compiled(text: str) -> CodeType:
    """``compile(text)``, kept from one run to the next as Python keeps a module's bytecode.

    A command's first compile costs ≈ 1.2 ms (the compiler's own start), each later one
    0.05–0.1 ms, and every write command compiles ten records' ``__init__``s: ≈ 2 ms of a
    ≈ 45 ms start-up (bench/cli.py). The code objects live in one file beside this module's
    bytecode (``__spec__.cached``: ``__pycache__`` or ``sys.pycache_prefix``), headed by the
    interpreter's version and trusted as its ``.pyc`` files are; a file that is missing, of
    another build or unreadable is compiled anew and written again at exit (never under
    ``-B``: ``sys.dont_write_bytecode``)."""
    global _CODES
    if _CODES is None:
        _CODES = _read_codes()
    code = _CODES.get(text)
    if code is None:
        # Without this module's `from __future__ import annotations`, as dataclasses compiles.
        code = _CODES[text] = compile(text, "<string>", "exec", dont_inherit=True)
        if not _CODES_MISSED:
            atexit.register(_write_codes)
        _CODES_MISSED.append(text)
    return code


_CODES: dict[str, CodeType] | None = None  # the cached code objects, read on first use
_CODES_MISSED: list[str] = []  # compiled in this run: the file is written at exit


def _codes_file() -> Path | None:
    """Beside this module's bytecode (None where it has no cache location)."""
    cached = __spec__.cached if __spec__ else None
    return Path(cached).with_suffix(".inits") if cached else None


# Code objects are the interpreter's own: a file made by another build is not read.
_HEADER = f"refine record inits {sys.version}\n".encode()


def _read_codes(file: Path | None = None) -> dict[str, CodeType]:
    file = file or _codes_file()
    try:
        data = file.read_bytes() if file else b""
        codes = marshal.loads(data[len(_HEADER) :]) if data.startswith(_HEADER) else {}
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if type(codes) is not dict:
        return {}
    return {t: c for t, c in codes.items() if type(t) is str and isinstance(c, CodeType)}


def _write_codes() -> None:
    """Merge this run's compiles into the file (another process may have written it since)."""
    file = _codes_file()
    if file is None or sys.dont_write_bytecode or _CODES is None:
        return
    codes = _read_codes(file)
    codes.update((text, _CODES[text]) for text in _CODES_MISSED)
    scratch = file.with_name(f"{file.name}.{os.getpid()}")
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        scratch.write_bytes(_HEADER + marshal.dumps(codes))
        os.replace(scratch, file)  # whole or not at all, for every reader
    except OSError:  # a read-only install: compiled again next time
        scratch.unlink(missing_ok=True)


def _plain_attributes(cls: type, fields: dict[str, tuple[str, Any]]) -> bool:
    """Every instance has a ``__dict__`` and no field's name is a data descriptor of the class
    (a slot, a property): storing into the ``__dict__`` is then what ``object.__setattr__``
    does."""
    if any("__slots__" in base.__dict__ for base in cls.__mro__[:-1]):
        return False
    return not any(
        hasattr(type(getattr(cls, name, None)), "__set__")
        or hasattr(type(getattr(cls, name, None)), "__delete__")
        for name in fields
    )


def _values(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    return lambda obj: tuple([getattr(obj, name) for name in names])


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        shown = ", ".join([f"{name}={getattr(self, name)!r}" for name in names])
        return f"{self.__class__.__qualname__}({shown})"

    return __repr__


def _eq(names: tuple[str, ...]) -> Callable[[Any, Any], Any]:
    if sys.version_info >= (3, 13):
        return _eq_by_field(names)
    values = _values(names)

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return __eq__


def _eq_by_field(names: tuple[str, ...]) -> Callable[[Any, Any], Any]:
    """Python 3.13's dataclasses: identity first, then ``a == b and ...`` field by field (so a
    copied record holding nan is unequal, where 3.11's tuple comparison found it equal)."""

    def __eq__(self: Any, other: Any) -> Any:
        if self is other:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        result: Any = True
        for name in names:
            result = getattr(self, name) == getattr(other, name)
            if not result:
                return result
        return result

    return __eq__


def _hash(names: tuple[str, ...]) -> Callable[[Any], int]:
    values = _values(names)

    def __hash__(self: Any) -> int:
        return hash(values(self))

    return __hash__


def _frozen(name: str, verb: str) -> Exception:
    from dataclasses import FrozenInstanceError

    return FrozenInstanceError(f"cannot {verb} field {name!r}")


def _setattr(cls: type[Any], names: tuple[str, ...]) -> Callable[[Any, str, Any], None]:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise _frozen(name, "assign to")
        super(cls, self).__setattr__(name, value)

    return __setattr__


def _delattr(cls: type[Any], names: tuple[str, ...]) -> Callable[[Any, str], None]:
    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise _frozen(name, "delete")
        super(cls, self).__delattr__(name)

    return __delattr__


class _Twin:
    """A dataclasses attribute of a record, made when first asked for: dataclasses builds a twin
    of the record (same bases, fields and defaults) and the record keeps the twin's value."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, owner: type) -> Any:
        record = next(c for c in owner.__mro__ if c.__dict__.get(self.name) is self)
        twin = _twin(record)
        for name in ("__dataclass_fields__", "__dataclass_params__"):
            setattr(record, name, twin.__dict__[name])
        return record.__dict__[self.name]


def _twin(record: type) -> type:
    import dataclasses

    own = {
        name: value
        for name, value in record.__dict__["__record_fields__"].items()
        if name in _annotations(record)
    }
    namespace: dict[str, Any] = {
        "__module__": record.__module__,
        "__qualname__": record.__qualname__,
        "__doc__": record.__doc__,
        "__annotations__": {name: annotation for name, (annotation, _) in own.items()},
    }
    namespace.update({n: d for n, (_, d) in own.items() if d is not _MISSING})
    return dataclasses.dataclass(frozen=True)(type(record.__name__, record.__bases__, namespace))
