"""bench/versus.py's KEDA side (lagpilot_dev.versus_config): the objects it applies and how it sums up."""

from __future__ import annotations

import pytest

from lagpilot.act.deployment import build_deployment
from lagpilot.spec import parse_spec
from lagpilot_dev.demo.config import RunNames, manifest
from lagpilot_dev.demo.traffic import PROFILES
from lagpilot_dev.versus_config import (
    HPA_SCALE_DOWN_WINDOW_S,
    KedaVariant,
    Round,
    consumer_deployment,
    figures,
    medians,
    round_order,
    scaled_object,
)

BOOT = "127.0.0.1:9092"


def names() -> RunNames:
    return RunNames.new("versus-test", "/tmp/versus-test")


def test_the_keda_deployment_runs_what_the_operator_would_render_for_the_demo_cr() -> None:
    n, prof = names(), PROFILES["fast"]
    dep = consumer_deployment(n, prof, BOOT)
    ours = build_deployment(n.name, n.ns, "uid-1", parse_spec(manifest(n, prof, BOOT)["spec"]), 1)
    c, o = dep["spec"]["template"]["spec"]["containers"][0], ours["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == o["command"] == ["lagpilot", "consume"]
    strip = {"LAGPILOT_OWNER_UID"}
    assert [e for e in c["env"] if e["name"] not in strip] == [e for e in o["env"] if e["name"] not in strip]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["LAGPILOT_BATCH_MAX_RECORDS"] == str(prof.batch_max_records)
    assert env["LAGPILOT_TOPIC"] == n.topic and env["LAGPILOT_GROUP_ID"] == n.group_id
    assert "ownerReferences" not in dep["metadata"] and dep["metadata"]["name"] == n.deployment
    assert dep["spec"]["replicas"] == 1


def test_the_keda_deployment_on_the_node_runs_the_demo_image_never_pulled() -> None:
    """bench/versus.py on the real node: the KEDA variant's pods run the image the CR names there
    (the demo image loaded into the node) and reach the broker at the pods' listener."""
    n, prof, pods_boot, image = names(), PROFILES["fast"], "10.244.0.1:9093", "lagpilot/demo-consumer:0.1.0"
    c = consumer_deployment(n, prof, pods_boot, image)["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == image and c["imagePullPolicy"] == "Never"
    assert {e["name"]: e.get("value") for e in c["env"]}["LAGPILOT_BOOTSTRAP_SERVERS"] == pods_boot
    ours = build_deployment(n.name, n.ns, "u", parse_spec(manifest(n, prof, pods_boot, image)["spec"]), 1)
    assert c["securityContext"] == ours["spec"]["template"]["spec"]["containers"][0]["securityContext"]


def test_the_scaled_object_defaults_and_the_same_replica_bounds_as_the_cr() -> None:
    n, prof = names(), PROFILES["fast"]
    so = scaled_object(n, prof, BOOT, KedaVariant())
    cr = manifest(n, prof, BOOT)["spec"]["scaling"]
    spec = so["spec"]
    assert (
        (spec["minReplicaCount"], spec["maxReplicaCount"]) == (cr["minReplicas"], cr["maxReplicas"]) == (1, 3)
    )
    assert spec["scaleTargetRef"] == {"name": n.deployment}
    assert (spec["pollingInterval"], spec["cooldownPeriod"]) == (30, 300)  # KEDA's defaults
    assert "advanced" not in spec  # the HPA's own behaviour
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "kafka"
    meta = trigger["metadata"]
    assert meta["lagThreshold"] == "10" and meta["topic"] == n.topic and meta["consumerGroup"] == n.group_id
    assert not set(meta) & {
        "limitToPartitionsWithLag",
        "excludePersistentLag",
        "ensureEvenDistributionOfPartitions",
    }


def test_a_tuned_variant_sets_the_window_and_the_options_in_both_the_object_and_the_model() -> None:
    v = KedaVariant.parse(
        "t:lagThreshold=100,scaleDown=60,pollingInterval=15,limitToPartitionsWithLag,excludePersistentLag"
    )
    so = scaled_object(names(), PROFILES["fast"], BOOT, v)
    assert so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"] == {
        "stabilizationWindowSeconds": 60
    }
    meta = so["spec"]["triggers"][0]["metadata"]
    assert meta["limitToPartitionsWithLag"] == meta["excludePersistentLag"] == "true"
    cfg = v.model(1, 3)
    assert (cfg.lag_threshold, cfg.down_window_s, cfg.polling_interval_s) == (100, 60.0, 15.0)
    assert cfg.limit_to_partitions_with_lag and cfg.exclude_persistent_lag
    assert not cfg.ensure_even_distribution_of_partitions
    assert KedaVariant().model(1, 3).down_window_s == HPA_SCALE_DOWN_WINDOW_S


@pytest.mark.parametrize(
    "text, word",
    [
        ("x:lagThreshold=0", "lagThreshold"),
        ("x:bogus=1", "bogus"),
        ("x:allowIdleConsumers", "allowIdleConsumers"),
        ("x:limitToPartitionsWithLag,ensureEvenDistributionOfPartitions", "cannot be set simultaneously"),
    ],
)
def test_a_bad_variant_names_what_is_wrong(text: str, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        KedaVariant.parse(text)


def test_rounds_alternate_and_the_summary_is_the_median_of_per_round_ratios() -> None:
    assert round_order(["lagpilot", "k"], 0) == ["lagpilot", "k"]
    assert round_order(["lagpilot", "k"], 1) == ["k", "lagpilot"]

    def fig(w: float, p99: float, rm: float) -> dict:
        return {
            "within_sla_fraction": w,
            "p99_s": p99,
            "replica_minutes": rm,
            "drain_task_minutes": 0.0,
            "scale_events": 2,
            "exactly_once": True,
        }

    rounds = [
        Round(0, [], {"lagpilot": fig(1.0, 40, 2.0), "k": fig(0.6, 80, 4.0)}),
        Round(1, [], {"lagpilot": fig(0.9, 50, 4.0), "k": fig(0.8, 60, 4.0)}),
        Round(2, [], {"lagpilot": fig(1.0, 30, 1.0), "k": fig(0.7, 90, 3.0)}),
    ]
    s = medians(rounds)
    assert s["k"]["median"]["replica_minutes"] == 4.0
    assert s["k"]["per_round_vs_base"]["replica_minutes_vs_lagpilot"] == 2.0  # ratios 2, 1, 3
    assert s["k"]["per_round_vs_base"]["p99_s_vs_lagpilot"] == 2.0  # 2, 1.2, 3
    assert s["k"]["per_round_vs_base"]["within_sla_points_vs_lagpilot"] == -30.0  # -40, -10, -30
    assert s["k"]["exactly_once_all_rounds"] and s["lagpilot"]["rounds"] == 3


def test_figures_read_the_demo_summary() -> None:
    summary = {
        "ok": True,
        "latency": {"within_sla_fraction": 0.75, "p99_s": 70.0},
        "replica_minutes": 3.5,
        "drain_task_minutes": 0.0,
        "produced": 100,
        "ledger": {"lost": 0, "duplicated": 0},
        "scale_events": [{"cause": "start"}, {"cause": "scaling"}, {"cause": "scaling"}],
        "max_replicas": 3,
    }
    f = figures(summary)
    assert f["scale_events"] == 2 and f["exactly_once"] and f["within_sla_fraction"] == 0.75
    assert not figures({**summary, "ledger": {"lost": 1, "duplicated": 0}})["exactly_once"]


def _summary() -> dict[str, object]:
    return {
        "sim_params": {
            "capacity": 50.0,
            "partitions": 3,
            "pod_start_s": 10.0,
            "sla_s": 60.0,
            "min_replicas": 1,
            "max_replicas": 3,
            "batch_max_records": 50,
            "batch_timeout_s": 1.0,
            "poll_interval_s": 5.0,
        },
        "latency": {"within_sla_fraction": 0.5, "p99_s": 90.0},
        "replica_minutes": 5.0,
        "drain_task_minutes": 0.0,
        "scale_events": [{"cause": "scaling", "from": 1, "t": 28.0, "to": 3}],
    }


def test_the_model_check_predicts_the_replica_trajectory_at_the_traces_own_step(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """KEDA's HPA acts every 15 s: the predicted trajectory is read at the simulator's 1 s step,
    not at the simulator's 60 s plotting samples (where a scale-up at 15 s shows at 60 s)."""
    from lagpilot_dev.versus import model_check

    rows = ["t_s,produce_msgs_per_s"] + [f"{t},{6 if t < 10 else 400 if t < 60 else 6}" for t in range(120)]
    (tmp_path / "trace.csv").write_text("\n".join(rows) + "\n")
    check = model_check(_summary(), KedaVariant(), tmp_path)
    changes = check["predicted_replica_changes"]
    assert changes[0] == (0.0, 1), changes
    # the burst starts at 10 s: the HPA's first sync after it (15 s) sees 2,000+ records of lag
    # and asks for the cap at once (+100 % / +4 pods per 15 s allows 1 -> 3)
    assert changes[1] == (15.0, 3), changes


def test_a_variant_comes_back_from_its_description() -> None:
    v = KedaVariant.parse("t:lagThreshold=5,scaleDown=0,pollingInterval=5,limitToPartitionsWithLag")
    assert KedaVariant.from_description(v.describe()) == v
    d = KedaVariant().describe()
    assert KedaVariant.from_description(d).model(1, 3) == KedaVariant().model(1, 3)


def test_recheck_recomputes_the_model_from_the_files_a_run_kept(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from lagpilot_dev.versus import recheck

    run = tmp_path / "round0-keda-default"
    run.mkdir()
    rows = ["t_s,produce_msgs_per_s"] + [f"{t},{6 if t < 10 else 400 if t < 60 else 6}" for t in range(120)]
    (run / "trace.csv").write_text("\n".join(rows) + "\n")
    (run / "summary.json").write_text(json.dumps(_summary()))
    measured = {
        "within_sla_fraction": 0.5,
        "p99_s": 90.0,
        "replica_minutes": 5.0,
        "drain_task_minutes": 0.0,
        "scale_events": 1,
        "exactly_once": True,
        "out": str(run),
        "model": {"stale": True},
    }
    (tmp_path / "versus.json").write_text(
        json.dumps(
            {
                "profile": "fast",
                "keda_version": "v2.20.2",
                "load_average": [9.0, 9.0, 9.0],
                "written_at": "then",
                "variants": {"lagpilot": "the CR", "keda-default": KedaVariant().describe()},
                "rounds": [{"index": 0, "order": ["keda-default"], "results": {"keda-default": measured}}],
            }
        )
    )
    out = recheck(tmp_path)
    again = json.loads((tmp_path / "versus.json").read_text())
    fig = again["rounds"][0]["results"]["keda-default"]
    assert "stale" not in fig["model"] and fig["model"]["predicted_replica_changes"][1] == [15.0, 3]
    assert (
        fig["within_sla_fraction"] == 0.5
        and again["load_average"] == [9.0, 9.0, 9.0]
        and again["rechecked_at"]
    )
    assert out["summary"]["keda-default"]["median"]["replica_minutes"] == 5.0
    assert (tmp_path / "versus.png").stat().st_size > 0  # the medians side by side


def test_the_round_plot_counts_the_running_drains_tasks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """versus_plot reads status.drain as the operator writes it now (subRanges, each with next/end)."""
    import json

    from lagpilot_dev.versus_plot import _tasks, plot_round

    drain = {
        "phase": "Running",
        "subRanges": [
            {"partition": 0, "index": 0, "start": 0, "next": 5, "end": 10},
            {"partition": 0, "index": 1, "start": 10, "next": 20, "end": 20},
            {"partition": 1, "index": 0, "start": 0, "next": 0, "end": 7},
        ],
    }
    assert _tasks({"drain": drain}) == 2 and _tasks({"drain": {**drain, "phase": "Planned"}}) == 0
    run = tmp_path / "round0-lagpilot"
    run.mkdir()
    rows = [
        {
            "t": t,
            "end": {"0": 10 * t},
            "in_sink": {"0": 5 * t},
            "pods": 1 + (t > 2),
            "drain": drain if t > 3 else None,
        }
        for t in range(6)
    ]
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plot_round(
        {"results": {"lagpilot": {"out": str(run), "within_sla_fraction": 0.9, "replica_minutes": 1.0}}},
        tmp_path / "round0.png",
        "t",
    )
    assert (tmp_path / "round0.png").stat().st_size > 0


def test_the_hot_profile_sends_each_partition_its_share_and_the_trace_keeps_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from lagpilot.sim import trace as sim_trace
    from lagpilot_dev.demo.config import profile_for
    from lagpilot_dev.demo.traffic import trace_rows, trace_weights, weighted_partition, write_trace

    hot = profile_for("hot", cold_drains=False)
    w = hot.phases[1].weights
    assert w is not None and hot.phases[0].weights is None
    counts = [0, 0, 0]
    for n in range(1, 1001):
        counts[weighted_partition(counts, w)] += 1
        assert all(abs(c - n * x / sum(w)) <= 1 for c, x in zip(counts, w, strict=False)), (n, counts)
    assert counts == [700, 150, 150]
    # the partition-0 rate is twice one consumer's, the total within the group's
    rate = hot.phases[1].rate
    assert rate * w[0] > 2 * hot.consumer_capacity * 0.95 and rate < hot.partitions * hot.consumer_capacity
    sent, by_p = {0: 6, 1: 150}, {1: {0: 105, 1: 22, 2: 23}}
    write_trace(tmp_path / "trace.csv", trace_rows(sent, 3), trace_weights(by_p, 3))
    tr = sim_trace.load_trace(str(tmp_path / "trace.csv"))
    assert tr.rates == (6.0, 150.0, 0.0) and tr.weights == (None, (0.7, 0.1467, 0.1533), None)
    write_trace(tmp_path / "even.csv", trace_rows(sent, 3), trace_weights({}, 3))
    assert (tmp_path / "even.csv").read_text().splitlines()[0] == "t_s,produce_msgs_per_s"


def test_recheck_merges_the_rounds_of_another_output(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from lagpilot_dev.versus import recheck

    def out(d, index: int, sla: float) -> None:  # type: ignore[no-untyped-def]
        d.mkdir()
        fig = {
            "within_sla_fraction": sla,
            "p99_s": 90.0,
            "replica_minutes": 5.0,
            "drain_task_minutes": 0.0,
            "scale_events": 1,
            "exactly_once": True,
            "out": str(d),
        }
        (d / "versus.json").write_text(
            json.dumps(
                {
                    "profile": "hot",
                    "keda_version": "v2.20.2",
                    "load_average": [1.0],
                    "written_at": "then",
                    "variants": {"lagpilot": "the CR"},
                    "rounds": [{"index": index, "order": ["lagpilot"], "results": {"lagpilot": fig}}],
                }
            )
        )

    out(tmp_path / "a", 0, 0.5)
    out(tmp_path / "b", 1, 0.7)
    res = recheck(tmp_path / "a", [tmp_path / "b"])
    assert [r["index"] for r in res["rounds"]] == [0, 1]
    assert (
        res["summary"]["lagpilot"]["rounds"] == 2
        and res["summary"]["lagpilot"]["median"]["within_sla_fraction"] == 0.6
    )


def test_each_run_gets_every_option_the_demo_parses(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """bench/versus.py drives the demo's stages with its own arguments: every option the demo's parser
    knows must be there with the demo's default (a flag added to the demo, e.g. --node, broke every
    versus run with an AttributeError in Demo.__init__)."""
    from pathlib import Path

    from lagpilot_dev import versus
    from lagpilot_dev.demo.run import parse_args

    seen = []

    class Captured(Exception):
        pass

    def capture(args, *rest):  # type: ignore[no-untyped-def]
        seen.append(args)
        raise Captured

    monkeypatch.setattr(versus, "VariantRun", capture)
    vs = versus.Versus(
        profile="hot", variants=[KedaVariant.parse("keda-default:")], rounds=1, out=Path(tmp_path)
    )
    with pytest.raises(Captured):
        vs._one(None, None, None, Path(tmp_path) / "r0", 0)
    (args,) = seen
    defaults = vars(parse_args([]))
    assert set(defaults) - set(vars(args)) == set()
    assert (
        args.profile == "hot" and args.namespace == "versus-lp-0" and args.out == str(Path(tmp_path) / "r0")
    )
    # on the real node, as the demo (issue 24 step 6: the pod runner is gone)
    assert args.node is True
    for k, v in defaults.items():
        if k not in ("profile", "namespace", "out", "plain", "node"):
            assert getattr(args, k) == v, k


def _versus_out(d, rounds, variants, load=1.0) -> None:  # type: ignore[no-untyped-def]
    """A finished output: rounds = [(index, {name: within_sla})]."""
    import json

    d.mkdir()
    rs = []
    for index, sla in rounds:
        res = {
            n: {
                "within_sla_fraction": s,
                "p99_s": 90.0,
                "replica_minutes": 5.0,
                "drain_task_minutes": 0.0,
                "scale_events": 1,
                "exactly_once": True,
                "out": str(d / f"round{index}-{n}"),
            }
            for n, s in sla.items()
        }
        rs.append({"index": index, "order": list(sla), "results": res})
        for n in sla:  # what a KEDA run keeps for the model's check
            run = d / f"round{index}-{n}"
            run.mkdir()
            rows = ["t_s,produce_msgs_per_s"] + [
                f"{t},{6 if t < 10 else 400 if t < 60 else 6}" for t in range(120)
            ]
            (run / "trace.csv").write_text("\n".join(rows) + "\n")
            (run / "summary.json").write_text(json.dumps(_summary()))
    (d / "versus.json").write_text(
        json.dumps(
            {
                "profile": "hot",
                "keda_version": "v2.20.2",
                "load_average": [load],
                "written_at": f"at {load}",
                "variants": variants,
                "rounds": rs,
            }
        )
    )


def test_recheck_merge_keeps_a_round_whose_index_the_first_output_has_too(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Two outputs that both started at round 0 (two bench runs): every round counts, none is dropped;
    the colliding round is numbered after the last, its order (who ran first) kept."""
    from lagpilot_dev.versus import recheck

    _versus_out(tmp_path / "a", [(0, {"lagpilot": 0.5}), (1, {"lagpilot": 0.6})], {"lagpilot": "the CR"}, 1.0)
    _versus_out(tmp_path / "b", [(0, {"lagpilot": 0.9})], {"lagpilot": "the CR"}, 2.0)
    res = recheck(tmp_path / "a", [tmp_path / "b"])
    assert [r["index"] for r in res["rounds"]] == [0, 1, 2]
    assert res["rounds"][2]["results"]["lagpilot"]["within_sla_fraction"] == 0.9
    assert (
        res["summary"]["lagpilot"]["rounds"] == 3
        and res["summary"]["lagpilot"]["median"]["within_sla_fraction"] == 0.6
    )
    # each output's load average and time stay with its rounds
    assert [m["load_average"] for m in res["merged_outputs"]] == [[1.0], [2.0]]
    assert [m["rounds"] for m in res["merged_outputs"]] == [[0, 1], [2]]
    # merging the same output again adds nothing
    again = recheck(tmp_path / "a", [tmp_path / "b"])
    assert [r["index"] for r in again["rounds"]] == [0, 1, 2]


def test_recheck_merges_outputs_of_other_variants_and_a_keda_only_round(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A KEDA variant added later (its rounds without lagpilot: --no-lagpilot) merges with an output that
    has lagpilot and another variant; each variant's medians are over the rounds it ran in."""
    from lagpilot_dev.versus import recheck

    d, t = KedaVariant().describe(), KedaVariant.parse("keda-tuned:lagThreshold=1,scaleDown=0").describe()
    _versus_out(
        tmp_path / "a",
        [(0, {"lagpilot": 1.0, "keda-default": 0.6})],
        {"lagpilot": "the CR", "keda-default": d},
    )
    _versus_out(tmp_path / "b", [(1, {"keda-tuned": 0.63})], {"keda-tuned": t})
    res = recheck(tmp_path / "a", [tmp_path / "b"])
    assert set(res["variants"]) == {"lagpilot", "keda-default", "keda-tuned"}
    assert res["summary"]["keda-tuned"]["rounds"] == 1 and res["summary"]["lagpilot"]["rounds"] == 1
    assert res["summary"]["keda-tuned"]["per_round_vs_base"]["within_sla_points_vs_lagpilot"] is None
    # the same name with other settings is not the same variant
    _versus_out(
        tmp_path / "c",
        [(2, {"keda-tuned": 0.5})],
        {"keda-tuned": KedaVariant.parse("keda-tuned:lagThreshold=5").describe()},
    )
    with pytest.raises(ValueError, match="keda-tuned"):
        recheck(tmp_path / "a", [tmp_path / "c"])


def test_a_keda_only_run_has_no_lagpilot_in_its_rounds(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    from lagpilot_dev.versus import Versus

    vs = Versus(
        profile="hot",
        variants=[KedaVariant.parse("a:"), KedaVariant.parse("b:lagThreshold=1")],
        rounds=1,
        out=Path(tmp_path),
        lagpilot=False,
    )
    assert vs.variant_names() == ["a", "b"]
