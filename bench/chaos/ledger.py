"""The end of the campaign (bench/chaos.py): the producer stopped, both groups caught up, and the
delivery ledgers compared with the topic's end offsets (lost, duplicated, replayed)."""

from __future__ import annotations

import time
from typing import Any

from bench.chaos.procs import PARTS, TERMINAL, say
from bench.chaos.stack import CampaignBase


class LedgerChecks(CampaignBase):
    def ends(self) -> dict[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"chaos-watermarks-{self.run_id}"})
        try:
            return {
                p: int(c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30)[1])
                for p in range(PARTS)
            }
        finally:
            c.close()

    def committed(self, group: str) -> dict[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            return {
                tp.partition: int(tp.offset)
                for tp in c.committed([TopicPartition(self.topic, p) for p in range(PARTS)], timeout=30)
            }
        finally:
            c.close()

    def finish(self) -> dict[str, Any]:
        import psycopg

        from lagpilot_runtime.sinks.ledger import ledger_counts, ledger_report, report_from_counts

        self.producer.stop()
        ends = self.ends()
        say(
            f"producer stopped; end offsets {ends} (acked {self.producer.acked}, errors {len(self.producer.errors)})"
        )

        def caught_up() -> bool:
            d = self.drain()
            return all(self.committed(g) == ends for g in self.groups.values()) and (
                not d or d.get("phase") in TERMINAL
            )

        caught = False
        for attempt in range(2):
            try:
                self.until(caught_up, "both groups caught up, no drain in flight", 600, 3)
                caught = True
                break
            except TimeoutError as exc:
                say(str(exc))
                if attempt == 0:
                    self.repair("at the end (groups not caught up)", time.time() - 120)
        if getattr(
            self, "aborted", None
        ):  # aborted_transactions: what a read_committed reader sees had to be delivered
            from bench.chaos.faults import report_visible

            visible = self.visible_offsets(ends)  # type: ignore[attr-defined]
            with psycopg.connect(self.dsn, connect_timeout=30) as conn:
                eos = report_visible(ledger_counts(conn, self.eos_table, self.topic), visible)
                alo = report_visible(ledger_counts(conn, self.alo_table, self.topic), visible)
            say(
                f"transactions in the topic: {sum(ends.values()) - eos['produced']} offsets not visible (aborted, markers)"
            )
            self.keep_evidence(eos, alo, visible)
            return {"ends": ends, "caught_up": caught, "eos": eos, "alo": alo, "visible": eos["produced"]}
        with psycopg.connect(self.dsn, connect_timeout=30) as conn:
            eos = report_from_counts(ledger_counts(conn, self.eos_table, self.topic), ends)
            alo = ledger_report(conn, self.alo_table, self.topic, ends)
        self.keep_evidence(eos, alo, {p: range(e) for p, e in ends.items()})
        return {"ends": ends, "caught_up": caught, "eos": eos, "alo": alo}

    def keep_evidence(self, eos: dict[str, Any], alo: dict[str, Any], expected: Any) -> None:
        """When a ledger shows lost or duplicated offsets: where (`runs`: per partition, the offset runs
        never delivered or delivered more than once), and the topic, the ledgers and the sink's
        progress table are kept for a look (`self.evidence_kept`; teardown drops them otherwise)."""
        import psycopg

        from bench.chaos.faults import offset_runs
        from lagpilot_runtime.sinks.ledger import ledger_counts

        for which, rep, table in (("eos", eos, self.eos_table), ("alo", alo, self.alo_table)):
            if rep.get("lost") or (which == "eos" and rep.get("duplicated")):
                with psycopg.connect(self.dsn, connect_timeout=30) as conn:
                    rep["runs"] = offset_runs(ledger_counts(conn, table, self.topic), expected)
                self.evidence_kept = True
                say(
                    f"{which}: lost/duplicated offsets kept as evidence (topic {self.topic}, table {table}): {rep['runs']}"
                )
