"""Flags that must be refused plainly, never with a traceback: --now, certs, serve --port; and
every flag's help with its default."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from tests.test_cli import STATE, run
from webhook.audit.now import parse_now
from webhook.cli import build_parser, main

# --- --now ----------------------------------------------------------------------------------------

NOON = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2026-10-30T12:00:00Z", NOON),
        ("2026-10-30t12:00:00z", NOON),
        ("2026-10-30 12:00:00Z", NOON),
        ("2026-10-30T14:00:00+02:00", NOON),
        ("2026-10-30T07:30:00-04:30", NOON),
        ("2026-10-30T12:00:00-00:00", NOON),
        ("2026-10-30T12:00:00.5Z", NOON + timedelta(microseconds=500_000)),
        ("2026-10-30T12:00:00.123456789Z", NOON + timedelta(microseconds=123_456)),
        ("2026-12-31T23:59:60Z", datetime(2026, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)),
    ],
    ids=[
        "upper case T and Z",
        "lower case t and z",
        "a space between date and time",
        "a positive offset",
        "a negative offset with minutes",
        "the unknown-local-offset -00:00",
        "one fractional digit",
        "nanoseconds, cut to microseconds",
        "a leap second",
    ],
)
def test_now_accepts_every_rfc3339_date_time(text: str, expected: datetime) -> None:
    parsed = parse_now(text)
    assert parsed == expected
    assert parsed.utcoffset() is not None


def test_now_keeps_the_offset_it_was_given() -> None:
    assert parse_now("2026-10-30T14:00:00+02:00").tzinfo == timezone(timedelta(hours=2))


@pytest.mark.parametrize(
    "text, says",
    [
        ("2026-10-30", "'2026-10-30' is a date alone: give a time and a zone too, "
         "e.g. 2026-10-30T00:00:00Z"),
        ("2026-10-30Z", "'2026-10-30Z' is a date alone: give a time and a zone too, "
         "e.g. 2026-10-30T00:00:00Z"),
        ("2026-10-30T12:00:00", "give a zone, e.g. 2026-10-30T12:00:00Z (UTC) or "
         "2026-10-30T12:00:00+02:00"),
        ("2026-10-30T12:00Z", "give the seconds too, e.g. 2026-10-30T12:00:00Z"),
        ("2026-13-30T12:00:00Z", "not a valid time: '2026-13-30T12:00:00Z' "
         "(month must be in 1..12)"),
        ("2026-10-30T12:00:00+24:00", "not a valid time: '2026-10-30T12:00:00+24:00' "
         "(offset +24:00 out of range)"),
        ("yesterday", "not an RFC 3339 time: 'yesterday'"),
        ("20261030T120000Z", "not an RFC 3339 time: '20261030T120000Z'"),
    ],
    ids=[
        "a date alone",
        "a date with a zone",
        "no zone",
        "no seconds",
        "month 13",
        "an offset of 24 hours",
        "a word",
        "ISO 8601 basic format",
    ],
)  # fmt: skip
def test_a_now_that_is_not_rfc3339_exits_2_saying_what_is_wrong(
    capsys: pytest.CaptureFixture[str], text: str, says: str
) -> None:
    code, out, err = run(capsys, "audit", "--state", STATE, "--now", text)
    assert (code, out) == (2, "")
    assert err.startswith(f"gpu-guard: --now: {says}")
    assert err.count("\n") == 1


def test_a_now_before_the_states_own_timestamps_exits_2_naming_the_newest(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "audit", "--state", STATE, "--now", "2026-09-30T08:00:00Z")
    assert (code, out) == (2, "")
    assert err == (
        "gpu-guard: --now 2026-09-30T08:00:00Z is earlier than the state's newest timestamp, "
        "2026-09-30T08:02:55Z (Node tower3 MemoryPressure lastTransitionTime): give a later "
        "--now, or none for the clock\n"
    )


def test_a_now_at_the_states_newest_timestamp_is_audited(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "audit", "--state", STATE, "--now", "2026-09-30T08:02:55Z")
    assert code == 1
    assert out.startswith("gpu-guard audit at 2026-09-30T08:02:55Z")


def test_the_demo_refuses_a_bad_now_before_it_starts_a_server(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "demo", "--now", "2026-10-30")
    assert (code, out) == (2, "")
    assert err.startswith("gpu-guard: --now: '2026-10-30' is a date alone")


# --- certs ----------------------------------------------------------------------------------------

BUNDLE = ("ca.crt", "ca.key", "tls.crt", "tls.key", "secret.yaml", "ca-bundle.b64")


def certs(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run(capsys, "certs", *argv)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--out", "/proc/gpu-guard-nope"], "certs --out /proc/gpu-guard-nope: "),
        (["--host", ""], "--host: an empty host name"),
        (["--host", "bad_name"], "--host: 'bad_name' is neither an IP address nor a DNS name"),
        (["--host=-lead.example"], "--host: '-lead.example' is neither an IP address"),
        (["--host", "a..b"], "--host: 'a..b' is neither an IP address nor a DNS name"),
        (["--host", "x" * 64 + ".example"], "is neither an IP address nor a DNS name"),
        (["--host", ("a" * 60 + ".") * 5], "a DNS name is at most 253 characters"),
        (["--service", "My Service"], "--service/--namespace: 'My Service' is neither"),
        (["--namespace", "ns_1"], "--service/--namespace: 'gpu-guard.ns_1' is neither"),
    ],
    ids=[
        "an --out that cannot be created",
        "an empty --host",
        "an underscore",
        "a label that starts with a hyphen",
        "an empty label",
        "a label of 64 characters",
        "a name over 253 characters",
        "a Service name with a space",
        "a namespace with an underscore",
    ],
)
def test_certs_refuses_bad_input_in_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    out_dir = tmp_path / "certs"
    code, out, err = certs(capsys, "--out", str(out_dir), *argv)
    assert (code, out) == (2, "")
    assert says in err
    assert err.startswith("gpu-guard: ") and err.count("\n") == 1
    assert not out_dir.exists()


def test_certs_out_naming_a_file_exits_2_and_leaves_the_file_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    existing = tmp_path / "notes.txt"
    existing.write_text("mine")
    code, _, err = certs(capsys, "--out", str(existing))
    assert code == 2
    assert err == f"gpu-guard: certs --out {existing}: not a directory\n"
    assert existing.read_text() == "mine"


@pytest.mark.parametrize("days", ["-5", "0", "soon", "3651", "99999999"])
def test_certs_days_must_be_a_whole_number_from_1_to_the_cas_lifetime(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], days: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["certs", "--out", str(tmp_path / "c"), "--days", days])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "argument --days: " in err
    assert "Traceback" not in err
    assert not (tmp_path / "c").exists()


def test_certs_never_overwrites_an_existing_key_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tls.key").write_bytes(b"the key in use")
    code, out, err = certs(capsys, "--out", str(tmp_path))
    assert (code, out) == (2, "")
    assert err == (
        f"gpu-guard: certs --out {tmp_path}: already there: tls.key; give --force to replace them\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tls.key"]
    assert (tmp_path / "tls.key").read_bytes() == b"the key in use"


def test_certs_force_replaces_the_bundle_and_narrows_a_widened_key_to_0600(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert certs(capsys, "--out", str(tmp_path))[0] == 0
    first = (tmp_path / "tls.key").read_bytes()
    (tmp_path / "tls.key").chmod(0o644)
    code, _, _ = certs(capsys, "--out", str(tmp_path), "--force")
    assert code == 0
    assert (tmp_path / "tls.key").read_bytes() != first
    assert (tmp_path / "tls.key").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(BUNDLE)


def test_certs_force_with_apply_is_refused_before_the_cluster_is_read(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = certs(capsys, "--apply", "--force", "--kubeconfig", "/nonexistent")
    assert code == 2
    assert err.startswith("gpu-guard: certs: --force replaces files of --out")


def test_certs_apply_refuses_a_bad_host_before_the_cluster_is_read(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = certs(capsys, "--apply", "--host", "", "--kubeconfig", "/nonexistent")
    assert code == 2
    assert err == "gpu-guard: --host: an empty host name\n"


def served_names(tls_crt: Path) -> tuple[str, list[str]]:
    cert = x509.load_pem_x509_certificate(tls_crt.read_bytes())
    (common_name,) = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return str(common_name.value), [str(n.value) for n in names]


def test_certs_accepts_ip_addresses_wildcards_and_names_longer_than_a_common_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long_name = ".".join(["a" * 40, "b" * 40, "example"])  # 89 characters: a valid DNS name
    argv = ["--host", long_name, "--host", "*.guard.example", "--host", "::1"]
    code, _, err = certs(capsys, "--out", str(tmp_path), *argv)
    assert code == 0, err
    common_name, names = served_names(tmp_path / "tls.crt")
    assert common_name == "*.guard.example"  # the first host that fits the 64 of a subject CN
    assert names[:3] == [long_name, "*.guard.example", "::1"]


# --- serve --port ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "port, reason",
    [
        ("99999", "a port is 1-65535, not 99999"),
        ("65536", "a port is 1-65535, not 65536"),
        ("0", "a port is 1-65535, not 0"),
        ("-1", "a port is 1-65535, not -1"),
        ("https", "not a port number: 'https'"),
    ],
)
def test_serve_port_must_be_1_to_65535(
    capsys: pytest.CaptureFixture[str], port: str, reason: str
) -> None:
    argv = ["serve", "--state", STATE, "--tls-cert", "c", "--tls-key", "k", f"--port={port}"]
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert f"argument --port: {reason}" in capsys.readouterr().err


@pytest.mark.parametrize("port", ["1", "8443", "65535"])
def test_serve_port_accepts_the_ends_of_its_range(port: str) -> None:
    argv = ["serve", "--tls-cert", "c", "--tls-key", "k", "--port", port]
    assert build_parser().parse_args(argv).port == int(port)


# --- help -----------------------------------------------------------------------------------------


def parsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """The parser and every subcommand's, with the command line that reaches each."""
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from parsers(sub)


def options() -> list[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    return [
        (f"{prog} {'/'.join(action.option_strings) or action.dest}", parser, action)
        for prog, parser in parsers(build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
    ]


OPTIONS = options()


@pytest.mark.parametrize(
    "parser, action", [(p, a) for _, p, a in OPTIONS], ids=[name for name, _, _ in OPTIONS]
)
def test_every_flag_has_help_and_shows_its_default(
    parser: argparse.ArgumentParser, action: argparse.Action
) -> None:
    assert action.help, "no help text"
    shown = parser._get_formatter()._expand_help(action)
    switch = action.nargs == 0  # store_true/store_false: the default is the flag's absence
    if action.default not in (None, False) and not switch:
        assert str(action.default) in shown, f"the help does not show the default: {shown!r}"


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {c.dest: c.help for c in commands._choices_actions}
    assert set(helps) == set(commands.choices)
    assert all(helps.values()), helps


def test_the_audit_help_shows_the_sync_timeout_and_output_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["audit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default 60.0)" in text
    assert "(default table)" in text
