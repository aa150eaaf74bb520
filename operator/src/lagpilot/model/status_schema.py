"""The status part of the CRD's schema, as data (verbatim from the CRD before the model existed).

The status is being redesigned (issue 26 item 2); until it has a pydantic model of its own, the
generator takes the status schema from `status_openapi_schema()` only, so that pointing it at that
model is a one-line change.
"""

from __future__ import annotations

import copy
from typing import Any

_STATUS: dict[str, Any] = {
    "type": "object",
    "description": "Observed state, written only by the operator through the status subresource. "
    "Lags and rates are as of the last observation.",
    "properties": {
        "observedGeneration": {
            "type": "integer",
            "format": "int64",
            "description": "metadata.generation of the spec the operator last acted on.",
        },
        "partitions": {
            "type": "integer",
            "format": "int32",
            "description": "Partition count of the topic, as last observed.",
        },
        "replicas": {
            "type": "integer",
            "format": "int32",
            "description": "Current replicas of the consumer Deployment.",
        },
        "desiredReplicas": {
            "type": "integer",
            "format": "int32",
            "description": "Replicas the last decision asked for.",
        },
        "totalLag": {
            "type": "integer",
            "format": "int64",
            "description": "Records produced but not yet committed by the group, over all partitions.",
        },
        "maxPartitionLag": {
            "type": "integer",
            "format": "int64",
            "description": "Lag of the most lagging partition.",
        },
        "produceRate": {
            "type": "number",
            "nullable": True,
            "description": "Smoothed produce rate of the whole topic, "
            "records per second; absent until measured.",
        },
        "capacityPerReplica": {
            "type": "number",
            "nullable": True,
            "description": "Records one consumer processes per busy "
            "second, from the runtime's capacity "
            "report in the commit metadata; absent "
            "until reported.",
        },
        "projectedCatchUpSeconds": {
            "type": "number",
            "nullable": True,
            "description": "Projected seconds until the lag is "
            "cleared at the current replica "
            "count; absent when unknown or when "
            "the group cannot catch up at all "
            "(produce rate above capacity).",
        },
        "lastScaleTime": {
            "type": "string",
            "format": "date-time",
            "description": "When the operator last changed the replica count (RFC 3339).",
        },
        "dataLossRecords": {
            "type": "integer",
            "format": "int64",
            "description": "Records deleted by retention before the "
            "group consumed them, counted since the "
            "operator first observed the group (each "
            "lost record once).",
        },
        "estimator": {
            "type": "object",
            "description": "The per-partition view and the operator's "
            "smoothed produce-rate estimate: one line per "
            "partition (committed, log-end and earliest "
            "offsets, lag, the age of the oldest waiting "
            "record when lagging, produce and consume rates "
            "to 0.001 records/s, data-loss bookkeeping), kept "
            "here so that a restarted operator resumes with "
            "the rates it had; its capacity and data-loss "
            "count are status.capacityPerReplica and "
            "status.dataLossRecords (not repeated here). The "
            "line's layout may change.",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "at": {
                    "type": "string",
                    "format": "date-time",
                    "description": "When the estimate was made "
                    "(RFC 3339). Each partition "
                    "is one line, "
                    '"committed=... end=... '
                    "low=... lag=... "
                    "[oldestAgeSeconds=...] "
                    "produceRate=... "
                    "consumeRate=... "
                    'samples=... window=...", '
                    'its window "<seconds '
                    "relative to this "
                    'time>:<log-end offset>" '
                    "samples.",
                }
            },
        },
        "scalingHistory": {
            "type": "object",
            "description": "Recent raw replica recommendations (the "
            "stabilization windows' memory) and the last "
            "scale time, kept here so that a restart "
            "does not forget a pending scale-down "
            "window. Internal; its layout may change.",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "lastScaleTime": {
                    "type": "string",
                    "format": "date-time",
                    "description": "When the "
                    "scaler "
                    "last "
                    "decided a "
                    "replica "
                    "change "
                    "(RFC 3339, "
                    "milliseconds): "
                    "its "
                    "stabilization "
                    "memory. "
                    "Not "
                    "status.lastScaleTime: "
                    "a change "
                    "decided "
                    "while a "
                    "drain "
                    "hand-off "
                    "holds the "
                    "replicas "
                    "is "
                    "recorded "
                    "here but "
                    "not "
                    "applied.",
                },
                "recommendationsAt": {
                    "type": "string",
                    "format": "date-time",
                    "description": "The newest recommendation's time (RFC 3339).",
                },
                "recommendations": {
                    "type": "string",
                    "description": "Raw "
                    "recommendations, "
                    '"<seconds '
                    "relative "
                    "to "
                    'recommendationsAt>:<replicas>" '
                    "separated "
                    "by "
                    "spaces.",
                },
            },
        },
        "drain": {
            "type": "object",
            "description": "The drain hand-off state machine (phase, planned "
            "ranges, progress, counts), persisted so that a "
            "restarted operator resumes it; ranges, sub-ranges "
            "and past drains one per line. Its layout is "
            "documented in docs/crd-reference.md.",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "plannedAt": {
                    "type": "string",
                    "format": "date-time",
                    "description": "When the drain was planned (its split offsets recorded). RFC 3339.",
                },
                "publishedAt": {
                    "type": "string",
                    "format": "date-time",
                    "description": "When the hand-off requests were published to the owners. RFC 3339.",
                },
                "quiescedAt": {
                    "type": "string",
                    "format": "date-time",
                    "description": "When the quiesce "
                    "fallback scaled the "
                    "consumers to 0 (absent "
                    "on the other paths). "
                    "RFC 3339.",
                },
                "handedOffAt": {
                    "type": "string",
                    "format": "date-time",
                    "description": "When every range was handed off. RFC 3339.",
                },
                "resumedAt": {
                    "type": "string",
                    "format": "date-time",
                    "description": "When the quiesced group "
                    "got its replicas back "
                    "(absent on the other "
                    "paths). RFC 3339.",
                },
                "startedAt": {
                    "type": "string",
                    "format": "date-time",
                    "description": "When the drain Job of the current attempt was launched. RFC 3339.",
                },
                "finishedAt": {
                    "type": "string",
                    "format": "date-time",
                    "description": "When the drain reached its final phase. RFC 3339.",
                },
                "retryAt": {
                    "type": "string",
                    "format": "date-time",
                    "description": "When a failed attempt is "
                    "retried, or a Failed "
                    "drain's next round of "
                    "attempts starts (absent "
                    "unless a retry is "
                    "scheduled). RFC 3339.",
                },
                "progressAt": {
                    "type": "string",
                    "format": "date-time",
                    "description": "When the current "
                    "attempt was launched "
                    "or its progress last "
                    "moved (the no-progress "
                    "detector's clock). RFC "
                    "3339.",
                },
                "history": {
                    "type": "array",
                    "description": "The last 5 finished "
                    "drains, one line each: "
                    '"drain 3 Verified '
                    "(AllRangesDone): "
                    "p0[400..6300) p2[0..75); "
                    "5975/5975 records in 41.5 "
                    's, pause 0 s" (an '
                    "operator before this one "
                    "wrote objects with the "
                    "same fields; both are "
                    "read).",
                    "items": {"x-kubernetes-preserve-unknown-fields": True},
                },
            },
        },
        "conditions": {
            "type": "array",
            "description": "Current state as conditions: Ready, Scaling, CatchUpAtRisk, Draining, Degraded.",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
            "items": {
                "type": "object",
                "required": ["type", "status"],
                "properties": {
                    "type": {
                        "type": "string",
                        "description": "Condition type (Ready, Scaling, CatchUpAtRisk, Draining, Degraded).",
                        "maxLength": 316,
                    },
                    "status": {
                        "type": "string",
                        "description": "True, False or Unknown.",
                        "enum": ["True", "False", "Unknown"],
                    },
                    "reason": {
                        "type": "string",
                        "description": "CamelCase machine-readable reason of the last transition.",
                        "maxLength": 1024,
                    },
                    "message": {
                        "type": "string",
                        "description": "Human-readable details.",
                        "maxLength": 32768,
                    },
                    "observedGeneration": {
                        "type": "integer",
                        "format": "int64",
                        "description": "metadata.generation the condition was computed for.",
                    },
                    "lastTransitionTime": {
                        "type": "string",
                        "format": "date-time",
                        "description": "When the status last changed (RFC 3339).",
                    },
                },
            },
        },
    },
}


def status_openapi_schema() -> dict[str, Any]:
    """The `status` property of the CRD's openAPIV3Schema (a fresh copy)."""
    return copy.deepcopy(_STATUS)
