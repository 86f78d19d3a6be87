"""The greedy core of the remap planner: move vps off overloaded pps.

Works on *normalized* loads: each vp's bytes/s and msgs/s divided by the mean
per live pp, so a pp's load is ``(b, m)`` with mean 1 in each dimension and its
combined load is ``max(b, m)``; the target ``T`` bounds both.

Potential: ``sum over pps and dimensions of max(0, load - T) ** 2``; it is zero
exactly when every pp is within the target. Each step considers, from the
(up to 3) pps with the largest excess, single moves of a pool of their vps
(sized like the excess, half of it, or the best transfer to each other pp, per
dimension; the largest; the most bytes- or msgs-skewed) to every other pp, and
swaps of such a vp with a vp of one of the 3 least loaded pps sized so the two
meet halfway. An action is ranked by potential drop per vp moved, where vps
moved include an estimate of the moves the receiving pp will then need to shed
its own excess (its largest vps first). Actions within 5 % of the best are
ordered by fewer moves, then preferences (do not scatter a small queue onto a
pp holding none of its vps; do not concentrate a hot queue on a pp already
holding as many of its vps as the source; hotter queues first), then (queue,
vp, pp): deterministic.

It stops when every pp is within ``T``, when no action lowers the potential,
or at the move cap (distinct vps off their original pp; a vp already moved may
move again for free; forced evacuations do not count).

``moves_lower_bound``: for every pp above the target, the fewest vps that must
leave it for its load to reach the target in both dimensions (largest vps
first, per dimension, the larger count); summed over pps. Any plan that brings
every pp within the target moves at least that many of these vps.

Pure logic: no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from sortedcontainers import SortedList

EPS = 1e-12
_POOL = 8  # vps taken from each candidate pool (per side of an ideal size)
_SOURCES = 3  # pps with the largest excess considered as sources per step
_SWAP_DESTS = 3  # least loaded pps considered as swap partners
_SHED_CAP = 32  # cap of the shed-moves estimate
_NEAR_BEST = 0.05  # actions within this fraction of the best gain per move count as ties
_SWAP_NEAR = 2  # partner vps examined around the ideal size


@dataclass(frozen=True, slots=True)
class Item:
    """One vp as the balancer sees it (loads normalized to the mean per pp)."""

    queue: str
    vp: int
    nb: float
    nm: float
    pp: int


class Balancer:
    """Mutable working state: where each item is and what each live pp carries."""

    def __init__(
        self,
        items: Sequence[Item],
        live_pps: Sequence[int],
        queue_weight: dict[str, float],
        hot_fraction: float,
        small_fraction: float,
    ) -> None:
        self.items = list(items)
        self.pps = sorted(set(live_pps))
        if not self.pps:
            raise ValueError("need at least one live physical partition")
        self._k_of = {pp: k for k, pp in enumerate(self.pps)}
        self.orig = [it.pp for it in self.items]
        self.where: list[int] = [-1] * len(self.items)
        n = len(self.pps)
        self.sb = [0.0] * n
        self.sm = [0.0] * n
        self.qcount: Counter[tuple[int, str]] = Counter()
        self.queue_weight = queue_weight
        self.hot_fraction = hot_fraction
        self.small_fraction = small_fraction
        members: list[list[int]] = [[] for _ in range(n)]
        for i, it in enumerate(self.items):
            k = self._k_of.get(it.pp, -1)
            if k >= 0:
                members[k].append(i)
                self.where[i] = k
                self.sb[k] += it.nb
                self.sm[k] += it.nm
                self.qcount[(k, it.queue)] += 1
        # bulk-built (one sort per list); kept sorted by _add/_remove afterwards
        its = self.items
        self.by_b: list[SortedList] = [SortedList((its[i].nb, i) for i in m) for m in members]
        self.by_m: list[SortedList] = [SortedList((its[i].nm, i) for i in m) for m in members]
        self.by_skew: list[SortedList] = [SortedList((its[i].nb - its[i].nm, i) for i in m) for m in members]

    # --- state updates -------------------------------------------------
    def _add(self, i: int, k: int) -> None:
        it = self.items[i]
        self.sb[k] += it.nb
        self.sm[k] += it.nm
        self.by_b[k].add((it.nb, i))
        self.by_m[k].add((it.nm, i))
        self.by_skew[k].add((it.nb - it.nm, i))
        self.qcount[(k, it.queue)] += 1
        self.where[i] = k

    def _remove(self, i: int) -> None:
        k = self.where[i]
        it = self.items[i]
        self.sb[k] -= it.nb
        self.sm[k] -= it.nm
        self.by_b[k].remove((it.nb, i))
        self.by_m[k].remove((it.nm, i))
        self.by_skew[k].remove((it.nb - it.nm, i))
        self.qcount[(k, it.queue)] -= 1
        self.where[i] = -1

    def _move(self, i: int, k: int) -> None:
        if self.where[i] >= 0:
            self._remove(i)
        self._add(i, k)

    # --- queries -------------------------------------------------------
    def load(self, k: int) -> float:
        return max(self.sb[k], self.sm[k])

    def imbalance(self) -> tuple[float, float, float]:
        """(combined, bytes, msgs): max over live pps (loads are normalized: mean 1)."""
        b = max(self.sb)
        m = max(self.sm)
        return max(b, m), b, m

    def assignment(self) -> list[int]:
        """The pp id of every item (an item never placed keeps its original pp)."""
        return [self.pps[k] if k >= 0 else self.orig[i] for i, k in enumerate(self.where)]

    def moved(self) -> int:
        """Distinct items now on another pp than they started on."""
        return sum(1 for i, pp in enumerate(self.assignment()) if pp != self.orig[i])

    # --- phases --------------------------------------------------------
    def evacuate(self) -> int:
        """Place every item whose pp is not live, heaviest first, each on the live pp
        where it raises the combined load least (then the one holding fewer vps).
        Returns how many were placed."""
        homeless = [i for i, k in enumerate(self.where) if k < 0]
        homeless.sort(key=lambda i: (-max(self.items[i].nb, self.items[i].nm), self.items[i].queue, self.items[i].vp))
        for i in homeless:
            it = self.items[i]
            best = min(
                range(len(self.pps)),
                key=lambda k: (max(self.sb[k] + it.nb, self.sm[k] + it.nm), len(self.by_b[k]), k),
            )
            self._add(i, best)
        return len(homeless)

    def moves_lower_bound(self, target: float) -> int:
        """See the module docstring."""
        total = 0
        for k in range(len(self.pps)):
            need = 0
            for s, lst in ((self.sb[k], self.by_b[k]), (self.sm[k], self.by_m[k])):
                excess = s - target
                count = 0
                for size, _ in reversed(lst):
                    if excess <= EPS:
                        break
                    excess -= size
                    count += 1
                need = max(need, count)
            total += need
        return total

    def _preference(self, i: int, p: int, q: int) -> tuple[int, int, float]:
        it = self.items[i]
        w = self.queue_weight.get(it.queue, 0.0)
        on_p = self.qcount[(p, it.queue)]
        on_q = self.qcount[(q, it.queue)]
        scatter = int(w <= self.small_fraction and on_q == 0 and on_p > 1)
        concentrate = int(w >= self.hot_fraction and on_q >= on_p)
        return scatter, concentrate, -w

    @staticmethod
    def _near(lst: SortedList, size: float, count: int) -> list[int]:
        idx = lst.bisect_left((size, -1))
        return [i for _, i in lst.islice(max(0, idx - count), idx + count)]

    @staticmethod
    def _ends(lst: SortedList, count: int) -> list[int]:
        n = len(lst)
        return [i for _, i in lst.islice(0, min(count, n))] + [i for _, i in lst.islice(max(0, n - count), n)]

    def _excess(self, b: float, m: float, target: float) -> float:
        """A pp's contribution to the potential: squared excess over the target, per dimension."""
        eb, em = b - target, m - target
        return (eb * eb if eb > 0 else 0.0) + (em * em if em > 0 else 0.0)

    def _move_pool(self, p: int, target: float, dests: Sequence[int]) -> list[int]:
        """Candidate vps of ``p``: sized like its excess, half of it, or like the best
        transfer to each destination (per dimension), the largest, and the most
        bytes-/msgs-skewed."""
        pool: set[int] = set()
        for lst, s in ((self.by_b[p], self.sb), (self.by_m[p], self.sm)):
            excess = s[p] - target
            if excess > EPS:
                pool.update(self._near(lst, excess, _POOL))
                pool.update(self._near(lst, excess / 2.0, _POOL // 2))
                for q in dests:
                    pool.update(self._near(lst, (excess + target - s[q]) / 2.0, _POOL // 4))
            pool.update(i for _, i in lst.islice(max(0, len(lst) - _POOL), len(lst)))
        pool.update(self._ends(self.by_skew[p], _POOL))
        return sorted(pool)

    def _shed_moves(self, k: int, b: float, m: float, target: float, exclude: int = -1) -> int:
        """Estimated moves for pp ``k`` at load ``(b, m)`` to get within the target by
        shedding its own largest vps (item ``exclude`` aside): per dimension, the
        larger count; at most ``_SHED_CAP``."""
        need = 0
        for excess, lst in ((b - target, self.by_b[k]), (m - target, self.by_m[k])):
            count = 0
            for size, i in reversed(lst):
                if excess <= EPS or count >= _SHED_CAP:
                    break
                if i != exclude:
                    excess -= size
                    count += 1
            if excess > EPS:
                count = _SHED_CAP
            need = max(need, count)
        return need

    def _new_moves(self, moved: set[int], relocations: Sequence[tuple[int, int]]) -> int:
        """How the count of distinct moved vps changes with ``relocations`` (item, pp index)."""
        delta = 0
        for i, k in relocations:
            if self.orig[i] in self._k_of:  # forced items never count
                delta += int(self.pps[k] != self.orig[i]) - int(i in moved)
        return delta

    def _best_action(self, target: float, moved: set[int], room: int) -> tuple[tuple[int, int], ...] | None:
        """The relocation(s) (one move, or a swap of two vps between two pps) to make
        next, within ``room`` new moves, among those lowering the potential (sum over
        pps and dimensions of squared excess over the target). Ranking: the potential
        drop per move, where moves include the estimated moves the receiving pp will
        need to shed what it gets above the target (``_shed_moves``); actions within
        5 % of the best count as equal and are ordered by fewer moves, preferences,
        then (queue, vp, pp). None when no action lowers the potential."""
        n = len(self.pps)
        f = [self._excess(self.sb[k], self.sm[k], target) for k in range(n)]
        sources = sorted((k for k in range(n) if f[k] > 0), key=lambda k: (-f[k], k))[:_SOURCES]
        # (gain per move, new moves, preference, order, relocations)
        cands: list[tuple[float, int, tuple[int, int, float], tuple[str, int, int], tuple[tuple[int, int], ...]]] = []

        def consider(
            gain: float, reloc: tuple[tuple[int, int], ...], q: int, qb: float, qm: float,
            pref: tuple[int, int, float], order: tuple[str, int, int],
        ) -> None:
            extra = self._new_moves(moved, reloc)
            if extra > room:
                return
            cost = max(extra, 1)
            if qb > target + EPS or qm > target + EPS:
                cost += self._shed_moves(q, qb, qm, target, reloc[1][0] if len(reloc) > 1 else -1)
            cands.append((gain / cost, extra, pref, order, reloc))

        for p in sources:
            sbp, smp = self.sb[p], self.sm[p]
            dests = [q for q in range(n) if q != p]
            pool = self._move_pool(p, target, dests)
            for i in pool:
                it = self.items[i]
                pb, pm = sbp - it.nb, smp - it.nm
                fp = f[p] - self._excess(pb, pm, target)
                if fp <= EPS:
                    continue
                for q in dests:
                    qb, qm = self.sb[q] + it.nb, self.sm[q] + it.nm
                    gain = fp + f[q] - self._excess(qb, qm, target)
                    if gain > EPS:
                        consider(gain, ((i, q),), q, qb, qm, self._preference(i, p, q), (it.queue, it.vp, q))
            # swaps with the least loaded pps: j (on q) sized so the transfer fills q's room
            by_room = sorted(dests, key=lambda k: (self.load(k), k))[:_SWAP_DESTS]
            bind_b = sbp - target >= smp - target
            for q in by_room:
                for i in pool:
                    it = self.items[i]
                    if bind_b:
                        js = self._near(self.by_b[q], it.nb - (sbp - self.sb[q]) / 2.0, _SWAP_NEAR)
                    else:
                        js = self._near(self.by_m[q], it.nm - (smp - self.sm[q]) / 2.0, _SWAP_NEAR)
                    for j in js:
                        jt = self.items[j]
                        db, dm = it.nb - jt.nb, it.nm - jt.nm
                        pb, pm, qb, qm = sbp - db, smp - dm, self.sb[q] + db, self.sm[q] + dm
                        gain = f[p] + f[q] - self._excess(pb, pm, target) - self._excess(qb, qm, target)
                        if gain > EPS:
                            pi, pj = self._preference(i, p, q), self._preference(j, q, p)
                            pref = (pi[0] + pj[0], pi[1] + pj[1], pi[2] + pj[2])
                            consider(gain, ((i, q), (j, p)), q, qb, qm, pref, (it.queue, it.vp, q))
        if not cands:
            return None
        best = max(c[0] for c in cands)
        near = [c for c in cands if c[0] >= best * (1.0 - _NEAR_BEST)]
        return min(near, key=lambda c: (c[1], c[2], -c[0], c[3]))[4]

    def balance(self, target: float, max_moves: int, max_steps: int) -> str:
        """Run the greedy; returns why it stopped: ``"target"``, ``"stuck"``,
        ``"cap"`` or ``"steps"``."""
        n = len(self.pps)
        # forced (evacuated) items are not counted: their original pp is not live
        moved = {
            i for i, pp in enumerate(self.orig)
            if pp in self._k_of and self.where[i] >= 0 and self.pps[self.where[i]] != pp
        }
        for _ in range(max_steps):
            p = max(range(n), key=lambda k: (self.load(k), -k))
            if self.load(p) <= target + EPS:
                return "target"
            if n < 2:
                return "stuck"
            room = max_moves - len(moved)
            action = self._best_action(target, moved, room)
            if action is None:
                return "cap" if room <= 0 else "stuck"
            for i, q in action:
                self._move(i, q)
                if self.orig[i] in self._k_of:
                    if self.pps[q] == self.orig[i]:
                        moved.discard(i)
                    else:
                        moved.add(i)
        return "steps"
