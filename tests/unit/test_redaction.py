"""M1: secret values never leave a process as error or log text (issue 23).

psycopg quotes a malformed DSN token, password included; a handler or client may echo any value it
was given. Every edge where an exception or a log line becomes text goes through one redactor
(lagpilot_runtime.redaction) that knows the secret values the process was given (ConsumerConfig)
and masks DSN/URL/password patterns it cannot know: describe_error (logs, DLQ headers, fatal
errors), the JSON log formatter (tracebacks included), the drain's outcome and termination
message, and the operator's reading of a drain pod's termination message (status.drain.lastError,
Warning events).
"""

from __future__ import annotations

import io
import logging
import uuid

import pytest

from lagpilot.act.drain_manifests import job_observation
from lagpilot_runtime import jsonlog
from lagpilot_runtime.config import ConsumerConfig
from lagpilot_runtime.drain import job as drain_job
from lagpilot_runtime.drain import runtime as drain_runtime
from lagpilot_runtime.handler import describe_error

SECRET = f"pw{uuid.uuid4().hex}"


def malformed_dsn_error(password: str) -> Exception:
    """The real client's error for a DSN whose password is not valid percent-encoding."""
    psycopg = pytest.importorskip("psycopg")
    try:
        psycopg.connect(f"postgresql://lagpilot:p%zz{password}@127.0.0.1:1/lagpilot", connect_timeout=2)
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError("a malformed DSN connected")


def env(**over: str) -> dict[str, str]:
    return {
        "LAGPILOT_BOOTSTRAP_SERVERS": "k:9092",
        "LAGPILOT_TOPIC": "t",
        "LAGPILOT_GROUP_ID": "g",
        "LAGPILOT_SINK": "postgres",
        **over,
    }


def test_the_fault_is_real_psycopg_echoes_the_password():
    exc = malformed_dsn_error(SECRET)
    assert SECRET in str(exc)  # what the client does; everything below must not pass it on


def test_describe_error_masks_a_malformed_dsn_token_without_knowing_the_value():
    text = describe_error(malformed_dsn_error(SECRET))
    assert SECRET not in text, text
    assert "invalid percent-encoded token" in text  # the cause stays readable


@pytest.mark.parametrize("shape", ["url", "kv"])
def test_values_the_process_was_given_are_masked_in_errors_and_log_lines(shape):
    pw, sasl = f"dsn{uuid.uuid4().hex}", f"sasl{uuid.uuid4().hex}"
    dsn = f"postgresql://u:{pw}@db:5432/x" if shape == "url" else f"host=db user=u password={pw} dbname=x"
    ConsumerConfig.from_env(
        env(
            LAGPILOT_POSTGRES_DSN=dsn,
            LAGPILOT_SECURITY_PROTOCOL="SASL_PLAINTEXT",
            LAGPILOT_SASL_MECHANISM="PLAIN",
            LAGPILOT_SASL_USERNAME="u",
            LAGPILOT_SASL_PASSWORD=sasl,
        )
    )
    # a handler that echoes what it was given, in its own words (no pattern to recognise)
    err = RuntimeError(f"cannot log in with {sasl} / token {pw}")
    assert pw not in describe_error(err) and sasl not in describe_error(err)
    out = io.StringIO()
    h = logging.StreamHandler(out)
    h.setFormatter(jsonlog.JsonFormatter())
    lg = logging.getLogger(f"test.redaction.{uuid.uuid4().hex}")
    lg.addHandler(h)
    lg.propagate = False
    try:
        raise err
    except RuntimeError:
        lg.error("failed: %s (dsn %s)", err, dsn, extra=jsonlog.fields(error=str(err)), exc_info=True)
    line = out.getvalue()
    assert "cannot log in with" in line and "Traceback" in line
    assert pw not in line and sasl not in line, line


def test_the_drain_outcome_and_termination_message_carry_no_secret(tmp_path, monkeypatch):
    exc = malformed_dsn_error(SECRET)

    def attempt():
        raise exc

    outcome = drain_runtime.outcome_of(attempt)
    assert outcome.exit == drain_job.EXIT_FAILED and "percent-encoded" in outcome.message
    assert SECRET not in outcome.message, outcome.message
    path = tmp_path / "termination-log"
    monkeypatch.setattr(drain_job, "TERMINATION_LOG", str(path))
    drain_job._termination_message(f"drain failed: connecting to postgresql://u:{SECRET}@db/x failed")
    assert path.read_text().startswith("drain failed") and SECRET not in path.read_text()


def test_the_operator_masks_a_drain_pods_termination_message():
    """What a pod writes (an older image, a custom one) is cleaned where the operator reads it: the
    text that becomes status.drain.lastError and the DrainFailed Warning event."""
    job = {"status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]}}
    for msg in (
        f'drain failed: ProgrammingError: invalid percent-encoded token: "p%zz{SECRET}"',
        f"drain failed: OperationalError: connection to postgresql://lagpilot:{SECRET}@db:5432/x refused",
        f"drain failed: bad conninfo host=db password={SECRET} user=u",
    ):
        pod = {
            "status": {
                "phase": "Failed",
                "containerStatuses": [{"state": {"terminated": {"exitCode": 1, "message": msg}}}],
            }
        }
        o = job_observation(job, [pod])
        assert o.message.startswith("drain failed") and SECRET not in o.message, o.message


def test_a_users_secret_env_is_named_to_the_runtime_and_its_value_masked():
    """template.env secretKeyRef entries: the operator names them (never their values) in
    LAGPILOT_SECRET_ENV; the runtime masks the values of the variables named there."""
    from lagpilot.act.deployment import build_env
    from lagpilot.spec import parse_spec

    spec = parse_spec(
        {
            "kafka": {"bootstrapServers": "k:9092"},
            "topic": "t",
            "groupId": "g",
            "processing": {"handler": "m:f"},
            "template": {
                "env": [
                    {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                    {"name": "PLAIN", "value": "x"},
                ]
            },
        }
    )
    env = {e["name"]: e for e in build_env(spec)}
    assert env["LAGPILOT_SECRET_ENV"]["value"] == "API_TOKEN"
    token = f"tok{uuid.uuid4().hex}"
    ConsumerConfig.from_env({**env_plain(build_env(spec)), "API_TOKEN": token})
    assert token not in describe_error(RuntimeError(f"the API refused {token}"))
    plain = parse_spec(
        {
            "kafka": {"bootstrapServers": "k:9092"},
            "topic": "t",
            "groupId": "g",
            "processing": {"handler": "m:f"},
        }
    )
    assert "LAGPILOT_SECRET_ENV" not in {
        e["name"] for e in build_env(plain)
    }  # nothing to name: nothing rendered


def env_plain(env: list[dict]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in env if "value" in e}
