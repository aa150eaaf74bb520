"""Fluid backlog: per-partition FIFO queues of produced records (segments ``[t0, t1, n]``) and the
latency the records accumulate until they are processed."""

from __future__ import annotations

from collections import deque


class _Queue:
    """FIFO of fluid segments [t0, t1, n]."""

    __slots__ = ("segs", "total")

    def __init__(self) -> None:
        self.segs: deque[list[float]] = deque()
        self.total = 0.0

    def push(self, t0: float, t1: float, n: float) -> None:
        if n > 0:
            self.segs.append([t0, t1, n])
            self.total += n

    def oldest(self) -> float | None:
        return self.segs[0][0] if self.segs else None

    def take(self, amount: float, s: float, e: float, out: _Latency) -> float:
        """Process up to ``amount`` records over [s, e] (linearly); returns what was processed."""
        amount = min(amount, self.total)
        if amount <= 0:
            return 0.0
        done = 0.0
        span = e - s
        while done < amount - 1e-12 and self.segs:
            seg = self.segs[0]
            t0, t1, n = seg
            x = min(n, amount - done)
            frac = x / n
            tx = t0 + (t1 - t0) * frac  # produce time of the last record taken
            ps = s + span * (done / amount)
            pe = s + span * ((done + x) / amount)
            out.add(ps - t0, pe - tx, x)
            if x >= n - 1e-9:
                self.segs.popleft()
            else:
                seg[0] = tx
                seg[2] = n - x
            done += x
        self.total = max(0.0, self.total - done)
        if not self.segs:
            self.total = 0.0
        return done

    def take_all(self) -> list[list[float]]:
        segs = list(self.segs)
        self.segs.clear()
        self.total = 0.0
        return segs


def _split(segs: list[list[float]], parts: int) -> list[_Queue]:
    """Cut a run of segments into ``parts`` queues of equal record counts (consecutive sub-ranges)."""
    total = sum(s[2] for s in segs)
    queues = [_Queue() for _ in range(max(1, parts))]
    if total <= 0:
        return queues
    size = total / len(queues)
    qi = 0
    room = size
    for t0, t1, n in segs:
        while n > 1e-9:
            x = n if qi == len(queues) - 1 else min(n, room)
            tx = t0 + (t1 - t0) * (x / n)
            queues[qi].push(t0, tx, x)
            t0, n = tx, n - x
            room -= x
            if room <= 1e-9 and qi < len(queues) - 1:
                qi += 1
                room = size
    return queues


class _Latency:
    """Latency distribution from uniform pieces (lo, hi, n); 1 s bins for the quantiles."""

    def __init__(self, sla_s: float) -> None:
        self.sla = sla_s
        self.within = 0.0
        self.count = 0.0
        self.max = 0.0
        self.bins: dict[int, float] = {}

    def add(self, lo: float, hi: float, n: float) -> None:
        lo, hi = max(0.0, min(lo, hi)), max(0.0, max(lo, hi))
        if n <= 0:
            return
        if hi <= self.sla:
            self.within += n
        elif lo < self.sla:
            self.within += n * (self.sla - lo) / (hi - lo)
        self.count += n
        self.max = max(self.max, hi)
        key = int((lo + hi) / 2)
        self.bins[key] = self.bins.get(key, 0.0) + n

    def quantile(self, q: float) -> float:
        if self.count <= 0:
            return 0.0
        goal = q * self.count
        acc = 0.0
        for k in sorted(self.bins):
            acc += self.bins[k]
            if acc >= goal:
                return float(k) + 0.5
        return self.max


def _take_before(q: _Queue, t_split: float) -> list[list[float]]:
    """Remove and return the records produced before ``t_split`` (the split offset) from the front."""
    out: list[list[float]] = []
    while q.segs and q.segs[0][0] < t_split - 1e-9:
        t0, t1, n = q.segs[0]
        if t1 <= t_split + 1e-9:
            out.append(q.segs.popleft())
            q.total -= n
            continue
        x = n * (t_split - t0) / (t1 - t0)
        out.append([t0, t_split, x])
        q.segs[0][0] = t_split
        q.segs[0][2] = n - x
        q.total -= x
        break
    if not q.segs:
        q.total = 0.0
    q.total = max(0.0, q.total)
    return out
