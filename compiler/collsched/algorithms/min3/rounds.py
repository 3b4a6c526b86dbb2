"""Large pools of single ranks where the ring does not fit: vectorized rounds in which
every receiver takes the earliest transfer it can get and every sender serves one
receiver (_schedule_rounds)."""
from __future__ import annotations

import numpy as np

from .model import _Model, _Plan

# Senders a receiver tries per round before waiting for the next one (round engine).
ROUND_TRIES = 4
# How far past its frontier a pool looks each round, in transfer times. Wider windows take
# more transfers per round (fewer rounds: 1024 ranks on grid-8x128 compile in about a
# third of the time of window 1) at a few percent of predicted time (docs/grid.md).
ROUND_WINDOW = 4.0


def _first_set_bit_from(words: np.ndarray, start_bit: np.ndarray) -> np.ndarray:
    """Per row of uint64 words: the first set bit at or after start_bit, circularly; -1 if none."""
    rows, nw = words.shape
    w0, b0 = start_bit >> 6, (start_bit & 63).astype(np.uint64)
    order = (w0[:, None] + np.arange(nw + 1)[None, :]) % nw
    rot = words[np.arange(rows)[:, None], order]
    high = ~np.uint64(0) << b0  # bits of the first word at or after b0
    rot[:, 0] &= high
    rot[:, nw] &= ~high  # the wrapped-around low bits of the first word, scanned last
    nz = rot != 0
    col = np.argmax(nz, axis=1)
    word = rot[np.arange(rows), col]
    low = word & (~word + np.uint64(1))
    bit = np.log2(np.maximum(low, 1).astype(np.float64)).astype(np.int64)
    out = order[np.arange(rows), col] * 64 + bit
    return np.where(nz.any(1), out, -1)


def _schedule_rounds(model: _Model, plan: _Plan, holders: list, pool_ranks: list,
                     n_items: int, nseg: int) -> None:
    """ScheduleInputPool for large pools of single ranks, all such pools at once, in rounds.

    Each round looks ROUND_WINDOW transfer times past each pool's frontier (the earliest
    moment a rank that still lacks pieces can receive and some rank can send); every
    receiver free by then, earliest first, is paired with a sender free by then, earliest
    first (trying the next ones when that sender has nothing it lacks or its FIFO link is
    still busy), and takes the piece it prefers among those the sender holds by then. Each
    sender serves one receiver per round; half-duplex ranks do one or the other. Times are
    the exact cost model's, as in the other engines.
    """
    rounds = _Rounds(model, holders, pool_ranks, n_items, nseg)
    # Each round takes a transfer or moves a frontier.
    for _ in range(4 * (rounds.D + 1) * rounds.n + 1000):
        if not rounds.round(plan):
            break
    else:
        raise RuntimeError("min3 round scheduler did not finish (a bug)")
    rounds.write_back()


def _set_bits(words: np.ndarray, r: np.ndarray, d: np.ndarray, D: int) -> None:
    """Set the bits of pieces d in rows r (bit q of a row stands for piece D-1-q)."""
    W = words.shape[1]
    q = D - 1 - d
    # np.bitwise_or.at(words, (r, q >> 6), bits), without its per-element cost: OR the
    # bits that fall into one word together first.
    cell = r * W + (q >> 6)
    bits = np.uint64(1) << (q & 63).astype(np.uint64)
    if len(cell) > 1:
        order = np.argsort(cell, kind="stable")
        cell, bits = cell[order], bits[order]
        first = np.concatenate(([True], cell[1:] != cell[:-1]))
        bits = np.bitwise_or.reduceat(bits, np.nonzero(first)[0])
        cell = cell[first]
    words.reshape(-1)[cell] |= bits


class _Rounds:
    """The round engine's state: the pools' block of the model (numpy, local rank indices,
    the ranks of a pool contiguous), the pieces each rank holds or will hold and those it
    holds by its pool's horizon (bit sets), and the pieces on their way (pend_*)."""

    def __init__(self, model: _Model, holders: list, pool_ranks: list, n_items: int, nseg: int):
        self.model = model
        self.ranks = ranks = np.concatenate(pool_ranks).astype(np.int64)
        self.npool = npool = len(pool_ranks)
        self.n = n = len(ranks)
        self.pool_of = pool_of = np.repeat(np.arange(npool), [len(r) for r in pool_ranks])
        self.pool_start = np.searchsorted(pool_of, np.arange(npool))
        D, W = n_items, (n_items + 63) // 64
        self.D = D
        self.ix = ix = np.ix_(ranks, ranks)
        self.same_pool = pool_of[:, None] == pool_of[None, :]
        self.dur, self.early, self.link = model.dur[ix], model.early[ix], model.link_free[ix].copy()
        self.os, self.gap, self.fifo = model.os[ix], model.g[ix], model.fifo[ix]
        self.send_free, self.recv_free = model.send_free[ranks].copy(), model.recv_free[ranks].copy()
        self.overlap, self.after = model.recv_overlap[ranks].copy(), model.recv_after[ranks].copy()
        self.arrival = model.arrival[ranks]
        self.full = model.full_duplex
        other = self.same_pool & ~np.eye(n, dtype=bool)
        self.dur_min = np.array([self.dur[np.ix_(r, r)][~np.eye(len(r), dtype=bool)].min()
                                 for r in (np.nonzero(pool_of == q)[0] for q in range(npool))])
        # the earliest a receive may start
        self.early_max = np.where(other, self.early, -np.inf).max(0)
        # Bit q of a rank's words stands for piece D-1-q: scanning bits upwards from a rank's
        # predecessor's piece walks the ring backwards, its tie-break (_preference).
        self.held = np.zeros((n, W), np.uint64)  # pieces a rank holds or will hold (taken transfers)
        self.usable = np.zeros((n, W), np.uint64)  # pieces a rank holds by the pool's horizon
        pad = np.arange(D, W * 64)  # bit positions past the last piece: held, never lacking
        pad_words = np.zeros(W, np.uint64)
        np.bitwise_or.at(pad_words, pad >> 6, np.uint64(1) << (pad & 63).astype(np.uint64))
        self.held |= pad_words[None, :]
        self.ready = np.full((n, D), np.inf)
        loc = np.full(len(model.dur), -1, np.int64)
        loc[ranks] = np.arange(n)
        pr, pd, pt = [], [], []
        for d in range(D):
            for g, t in holders[d].items():
                pr.append(loc[g]), pd.append(d), pt.append(t)
        self.pend_r, self.pend_d, self.pend_t = np.array(pr, np.int64), np.array(pd, np.int64), np.array(pt)
        self.ready[self.pend_r, self.pend_d] = self.pend_t
        _set_bits(self.held, self.pend_r, self.pend_d, D)
        self.need = D - np.isfinite(self.ready).sum(1)
        self.start_bit = D - 1 - ((ranks * nseg - 1) % D)  # the receiver's preferred piece
        self.floor = np.zeros(npool)

    def round(self, plan: _Plan) -> bool:
        """One round: take the transfers it pairs (into `plan`), or move the frontiers of
        the pools where nothing can move before the next event. False once no rank lacks
        a piece."""
        needy = self.need > 0
        if not needy.any():
            return False
        pool_of = self.pool_of
        recv_from = np.maximum(self.after, self.recv_free - self.early_max * self.overlap)
        # Per pool (ranks of a pool are contiguous): the earliest needy receiver, sender.
        t_recv = np.minimum.reduceat(np.where(needy, recv_from, np.inf), self.pool_start)
        t_send = np.minimum.reduceat(self.send_free, self.pool_start)
        horizon = np.maximum(np.maximum(t_recv, t_send), self.floor) + ROUND_WINDOW * self.dur_min
        # Pieces arriving by the horizon become usable.
        due = self.pend_t <= horizon[pool_of[self.pend_r]]
        if due.any():
            _set_bits(self.usable, self.pend_r[due], self.pend_d[due], self.D)
            self.pend_r, self.pend_d, self.pend_t = self.pend_r[~due], self.pend_d[~due], self.pend_t[~due]
        h = horizon[pool_of]
        recv_ok = np.nonzero(needy & (recv_from <= h))[0]
        send_ok = np.nonzero(self.send_free <= h)[0]
        recv_ok = recv_ok[np.lexsort((recv_ok, recv_from[recv_ok], pool_of[recv_ok]))]
        send_ok = send_ok[np.lexsort((send_ok, self.send_free[send_ok], pool_of[send_ok]))]
        got_s, got_r = self._pair(recv_ok, send_ok, recv_from)
        if not len(got_s):
            self._advance(horizon, recv_from, needy, t_recv)
            return True
        self._take(plan, np.asarray(got_s, np.int64), np.asarray(got_r, np.int64))
        return True

    def _pair(self, recv_ok, send_ok, recv_from):
        """(senders, receivers) of the transfers this round takes, both ascending in the
        order taken."""
        pool_of, npool, full, busy_link = self.pool_of, self.npool, self.full, self.link
        s_pool = pool_of[send_ok]
        s_first = np.searchsorted(s_pool, np.arange(npool))
        s_count = np.bincount(s_pool, minlength=npool)
        r_pool = pool_of[recv_ok]
        r_pos = np.arange(len(recv_ok)) - np.searchsorted(r_pool, r_pool)
        # Pairing: at shift k, every receiver not yet paired asks its pool's sender
        # (its position + k) mod count; a sender takes the first receiver asking it.
        matched = np.zeros(len(recv_ok), bool)
        busy = np.zeros(self.n, bool)  # sender taken (half duplex: either role taken)
        got_s, got_r = [], []
        cand = np.nonzero(s_count[r_pool] > 0)[0]
        for shift in range(ROUND_TRIES if len(cand) else 0):
            # First look for senders whose link is free by the time their ports are.
            cand = np.nonzero(~matched & (s_count[r_pool] > 0))[0]
            if len(cand) == 0:
                break
            cnt = s_count[r_pool[cand]]
            s = send_ok[s_first[r_pool[cand]] + (r_pos[cand] + shift) % cnt]
            r = recv_ok[cand]
            # A pair needs a free link (a FIFO link frees only when its last message has
            # landed: the receiver then tries the next sender, as the exact greedy would).
            ok = (s != r) & ~busy[s] & (shift < cnt)
            ok &= busy_link[s, r] <= np.maximum(self.send_free[s], recv_from[r])
            if not full:
                ok &= ~busy[r]
            ok[ok] = (self.usable[s[ok]] & ~self.held[r[ok]]).any(1)
            sel = np.nonzero(ok)[0]
            if len(sel):
                _, first = np.unique(s[sel], return_index=True)  # one receiver per sender
                sel = sel[np.sort(first)]
                if not full:  # one port: a rank sends or receives in a round, earliest first
                    keep = []
                    for i, a, b in zip(sel.tolist(), s[sel].tolist(), r[sel].tolist()):
                        if not (busy[a] or busy[b]):
                            busy[a] = busy[b] = True
                            keep.append(i)
                    sel = np.array(keep, np.int64)
                matched[cand[sel]] = True
                busy[s[sel]] = True
                if not full:
                    busy[r[sel]] = True
                got_s.append(s[sel]), got_r.append(r[sel])
        if got_s:
            return np.concatenate(got_s), np.concatenate(got_r)
        if not len(cand):
            return got_s, got_r
        # Nothing paired: every sender is tried once, busy links included, in the same
        # order. Few receivers can take anything then: only those that some sender of
        # their pool can serve are looked at, and only the proposals that could be
        # taken (`_proposals`), then taken in order (`_pair_up`).
        starts = s_first[s_count > 0]
        union = np.zeros((npool, self.usable.shape[1]), np.uint64)
        union[s_count > 0] = np.bitwise_or.reduceat(self.usable[send_ok], starts, axis=0)
        cand = cand[(union[r_pool[cand]] & ~self.held[recv_ok[cand]]).any(1)]
        return self._pair_up(*self._proposals(cand, send_ok, s_first, s_count, recv_ok, r_pool, r_pos),
                             recv_ok)

    def _proposals(self, cand, send_ok, s_first, s_count, recv_ok, r_pool, r_pos):
        """(shift, receiver index, sender) of the proposals (every sender once, busy links
        included) that pass every condition but the sender (half duplex: either rank)
        being taken, by shift then receiver. Pool by pool: all its senders against all
        its candidate receivers at once."""
        held, usable = self.held, self.usable
        ks, iis, ss = [], [], []
        pools = r_pool[cand]
        for q in np.unique(pools).tolist():
            idx = cand[pools == q]
            senders = send_ok[s_first[q]:s_first[q] + s_count[q]]
            receivers = recv_ok[idx]
            can = (~held[receivers][:, None, :] & usable[senders][None, :, :]).any(-1)
            can &= senders[None, :] != receivers[:, None]
            i, pos = np.nonzero(can)
            ks.append((pos - r_pos[idx][i]) % len(senders)), iis.append(idx[i]), ss.append(senders[pos])
        if not ks:
            return [], [], []
        k, i, s = np.concatenate(ks), np.concatenate(iis), np.concatenate(ss)
        order = np.lexsort((i, k))
        return k[order].tolist(), i[order].tolist(), s[order].tolist()

    def _pair_up(self, ks, iis, ss, recv_ok):
        """The proposals taken, shift by shift, as the strict shifts take them: each
        receiver once; a sender by the first receiver asking it while it is free. Half
        duplex: a sender only by its first asker among those whose ranks were both free
        before this shift, and only if neither was taken since."""
        recv = recv_ok.tolist()
        matched, got_s, got_r = set(), [], []
        if self.full:
            busy = set()
            for i, sd in zip(iis, ss):
                if i not in matched and sd not in busy:
                    matched.add(i), busy.add(sd)
                    got_s.append(sd), got_r.append(recv[i])
            return got_s, got_r
        busy, newly, claimed, shift = set(), set(), set(), -1
        for k, i, sd in zip(ks, iis, ss):
            if k != shift:
                busy |= newly
                newly, claimed, shift = set(), set(), k
            rv = recv[i]
            if i in matched or sd in busy or rv in busy or sd in claimed:
                continue
            claimed.add(sd)
            if sd not in newly and rv not in newly:
                newly.update((sd, rv))
                matched.add(i)
                got_s.append(sd), got_r.append(rv)
        return got_s, got_r

    def _advance(self, horizon, recv_from, needy, t_recv) -> None:
        """Nothing can move before the next event (a port frees or a piece arrives): move
        the frontier of each pool that has one to it."""
        pool_of, n = self.pool_of, self.n
        nxt = np.full(self.npool, np.inf)
        for times, who in ((self.send_free, np.arange(n)), (recv_from[needy], np.nonzero(needy)[0]),
                           (self.pend_t, self.pend_r)):
            later = times > horizon[pool_of[who]]
            np.minimum.at(nxt, pool_of[who[later]], times[later])
        moved = np.isfinite(nxt) & (t_recv < np.inf)
        if not moved.any():
            raise RuntimeError("min3 round scheduler is stuck (a bug): no event left")
        self.floor = np.where(moved, np.maximum(self.floor, nxt - self.dur_min), self.floor)

    def _take(self, plan: _Plan, s: np.ndarray, r: np.ndarray) -> None:
        """Take transfers s -> r, each of the piece its receiver prefers among those its
        sender holds by the horizon (the model's update rules, vectorized)."""
        send_free, recv_free, overlap, after = self.send_free, self.recv_free, self.overlap, self.after
        D, arrival = self.D, self.arrival
        q = _first_set_bit_from(self.usable[s] & ~self.held[r], self.start_bit[r])
        d = D - 1 - q
        st = np.maximum.reduce([send_free[s], self.ready[s, d], self.link[s, r], after[r],
                                recv_free[r] - self.early[s, r] * overlap[r]])
        en = st + self.dur[s, r]
        self.link[s, r] = np.where(self.fifo[s, r], en, st + self.gap[s, r])
        after[r] = st
        sent = st + self.os[s, r]
        if self.full:
            send_free[s], recv_free[r] = sent, en
        else:
            recv_free[s], send_free[s], overlap[s] = sent, np.maximum(arrival[s], sent), False
            recv_free[r], send_free[r], overlap[r] = en, np.maximum(arrival[r], en), True
        self.ready[r, d] = en
        _set_bits(self.held, r, d, D)
        self.need[r] -= 1
        self.pend_r, self.pend_d = np.r_[self.pend_r, r], np.r_[self.pend_d, d]
        self.pend_t = np.r_[self.pend_t, en]
        plan.extend(self.ranks[s], self.ranks[r], d, st, en)

    def write_back(self) -> None:
        model, ranks, ix = self.model, self.ranks, self.ix
        model.link_free[ix] = np.where(self.same_pool, self.link, model.link_free[ix])
        model.send_free[ranks], model.recv_free[ranks] = self.send_free, self.recv_free
        model.recv_overlap[ranks], model.recv_after[ranks] = self.overlap, self.after
