"""What ``import inkpen`` loads: what opening a Bookie needs, and none of the optional parts.

A writer process pays its imports before its first put (a crash test's writer, a CLI command, a
Spark worker), so the package leaves out of ``import inkpen`` everything ``open`` does not need:
the CLI and its renderer (rich), the S3 clients (boto3, botocore, obstore), Spark, Prometheus,
asyncio (``inkpen.aio``) and structlog (imported on the first log event a logger lets through).
Each case runs in a fresh interpreter, so nothing this test process imported counts.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

OPTIONAL = ("rich", "boto3", "botocore", "obstore", "pyspark", "prometheus_client", "click")
LAZY = ("structlog", "asyncio", "inkpen.aio", "inkpen.shards", "inkpen.manifest.copies")


def _loaded_after(code: str) -> set[str]:
    probe = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    ran = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert ran.returncode == 0, ran.stderr
    return set(json.loads(ran.stdout.splitlines()[-1]))


def _top(modules: set[str]) -> set[str]:
    return modules | {name.split(".")[0] for name in modules}


def test_import_inkpen_loads_no_optional_part() -> None:
    loaded = _top(_loaded_after("import inkpen"))
    assert not loaded & set(OPTIONAL), sorted(loaded & set(OPTIONAL))
    assert not loaded & set(LAZY), sorted(loaded & set(LAZY))


def test_a_local_bookie_used_without_logging_loads_no_optional_part(tmp_path: object) -> None:
    loaded = _top(
        _loaded_after(
            "import inkpen\n"
            f"with inkpen.open({str(tmp_path)!r}) as book:\n"
            "    book.put('b', 'k', b'v')\n"
            "    assert book.get('b', 'k') == b'v'\n"
        )
    )
    assert not loaded & set(OPTIONAL), sorted(loaded & set(OPTIONAL))
    assert "structlog" not in loaded  # no logging configured: no event is let through


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("aio", "inkpen.aio"),
        ("shards", "inkpen.shards"),
        ("backup", "inkpen.operations"),
        ("Reader", "inkpen.reader"),
        ("open_compactor", "inkpen.actors.engine.compactor"),
    ],
)
def test_a_lazy_name_loads_its_module_on_first_use(name: str, module: str) -> None:
    loaded = _loaded_after(f"import inkpen\nassert inkpen.{name} is not None")
    assert module in loaded


def test_every_public_name_resolves() -> None:
    import inkpen

    for name in inkpen.__all__:
        assert getattr(inkpen, name) is not None, name
    assert set(inkpen.__all__) <= set(dir(inkpen))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = inkpen.nope


def test_the_first_enabled_event_formats_through_structlog() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import logging, sys, inkpen.logs\n"
            "logging.basicConfig(stream=sys.stdout, level=logging.INFO, format='%(message)s')\n"
            "log = inkpen.logs.get_logger('inkpen.probe')\n"
            "log.debug('probe.hidden', n=1)\n"
            "assert 'structlog' not in sys.modules\n"
            "log.info('probe.shown', n=2, words='a b')\n",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == 'event=probe.shown level=info n=2 words="a b"'


def test_inkpen_help_imports_no_command() -> None:
    loaded = _top(
        _loaded_after(
            "import sys\n"
            "from inkpen.cli import main\n"
            "try:\n"
            "    main(['--help'])\n"
            "except SystemExit:\n"
            "    pass\n"
        )
    )
    assert not loaded & {"rich", "boto3", "botocore", "obstore", "pyspark", "structlog"}
    assert "inkpen.cli.info" not in loaded


def test_each_command_summary_is_the_first_paragraph_of_its_help() -> None:
    import inkpen.cli

    for name in inkpen.cli.COMMANDS:
        command = inkpen.cli.load_command(name)
        first = (command.help or "").strip().split("\n\n")[0]
        assert inkpen.cli.COMMANDS[name].summary == " ".join(first.split()), name
        assert command.name == name
