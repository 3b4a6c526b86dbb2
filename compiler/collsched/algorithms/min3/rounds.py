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
    still busy), and takes the piece it prefers among those the sender holds by then. Each sender serves one receiver per round; half-duplex
    ranks do one or the other. Times are the exact cost model's, as in the other engines.
    """
    ranks = np.concatenate(pool_ranks).astype(np.int64)
    npool = len(pool_ranks)
    n = len(ranks)
    pool_of = np.repeat(np.arange(npool), [len(r) for r in pool_ranks])
    pool_start = np.searchsorted(pool_of, np.arange(npool))
    D, W = n_items, (n_items + 63) // 64
    p = len(model.dur)
    ix = np.ix_(ranks, ranks)
    same_pool = pool_of[:, None] == pool_of[None, :]
    dur, early, link = model.dur[ix], model.early[ix], model.link_free[ix].copy()
    os_, gap, fifo = model.os[ix], model.g[ix], model.fifo[ix]
    send_free, recv_free = model.send_free[ranks].copy(), model.recv_free[ranks].copy()
    overlap, after = model.recv_overlap[ranks].copy(), model.recv_after[ranks].copy()
    arrival = model.arrival[ranks]
    full = model.full_duplex
    other = same_pool & ~np.eye(n, dtype=bool)
    dur_min = np.array([dur[np.ix_(r, r)][~np.eye(len(r), dtype=bool)].min()
                        for r in (np.nonzero(pool_of == q)[0] for q in range(npool))])
    early_max = np.where(other, early, -np.inf).max(0)  # the earliest a receive may start
    # Bit q of a rank's words stands for piece D-1-q: scanning bits upwards from a rank's
    # predecessor's piece walks the ring backwards, its tie-break (_preference).
    held = np.zeros((n, W), np.uint64)  # pieces a rank holds or will hold (taken transfers)
    usable = np.zeros((n, W), np.uint64)  # pieces a rank holds by the pool's horizon
    pad = np.arange(D, W * 64)  # bit positions past the last piece: held, never lacking
    pad_words = np.zeros(W, np.uint64)
    np.bitwise_or.at(pad_words, pad >> 6, np.uint64(1) << (pad & 63).astype(np.uint64))
    held |= pad_words[None, :]
    ready = np.full((n, D), np.inf)
    loc = np.full(p, -1, np.int64)
    loc[ranks] = np.arange(n)
    pr, pd, pt = [], [], []
    for d in range(D):
        for g, t in holders[d].items():
            pr.append(loc[g]), pd.append(d), pt.append(t)
    pend_r, pend_d, pend_t = np.array(pr, np.int64), np.array(pd, np.int64), np.array(pt)
    ready[pend_r, pend_d] = pend_t
    one = np.uint64(1)

    def set_bits(words, r, d):
        q = D - 1 - d
        # np.bitwise_or.at(words, (r, q >> 6), bits), without its per-element cost: OR the
        # bits that fall into one word together first.
        cell = r * W + (q >> 6)
        bits = one << (q & 63).astype(np.uint64)
        if len(cell) > 1:
            order = np.argsort(cell, kind="stable")
            cell, bits = cell[order], bits[order]
            first = np.concatenate(([True], cell[1:] != cell[:-1]))
            bits = np.bitwise_or.reduceat(bits, np.nonzero(first)[0])
            cell = cell[first]
        words.reshape(-1)[cell] |= bits

    set_bits(held, pend_r, pend_d)

    def proposals(cand, send_ok, s_first, s_count, recv_ok, r_pool, r_pos):
        """(shift, receiver index, sender) of the proposals (every sender once, busy links
        included) that pass every condition but the sender (half duplex: either rank)
        being taken, by shift then receiver. Pool by pool: all its senders against all
        its candidate receivers at once."""
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

    def pair_up(ks, iis, ss, recv_ok):
        """The proposals taken, shift by shift, as the strict shifts take them: each
        receiver once; a sender by the first receiver asking it while it is free. Half
        duplex: a sender only by its first asker among those whose ranks were both free
        before this shift, and only if neither was taken since."""
        recv = recv_ok.tolist()
        matched, got_s, got_r = set(), [], []
        if full:
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

    need = D - np.isfinite(ready).sum(1)
    start_bit = D - 1 - ((ranks * nseg - 1) % D)  # the receiver's preferred piece
    floor = np.zeros(npool)
    for _ in range(4 * (D + 1) * n + 1000):  # each round takes a transfer or moves a frontier
        needy = need > 0
        if not needy.any():
            break
        recv_from = np.maximum(after, recv_free - early_max * overlap)
        # Per pool (ranks of a pool are contiguous): the earliest needy receiver, sender.
        t_recv = np.minimum.reduceat(np.where(needy, recv_from, np.inf), pool_start)
        t_send = np.minimum.reduceat(send_free, pool_start)
        horizon = np.maximum(np.maximum(t_recv, t_send), floor) + ROUND_WINDOW * dur_min
        # Pieces arriving by the horizon become usable.
        due = pend_t <= horizon[pool_of[pend_r]]
        if due.any():
            set_bits(usable, pend_r[due], pend_d[due])
            pend_r, pend_d, pend_t = pend_r[~due], pend_d[~due], pend_t[~due]
        h = horizon[pool_of]
        recv_ok = np.nonzero(needy & (recv_from <= h))[0]
        send_ok = np.nonzero(send_free <= h)[0]
        recv_ok = recv_ok[np.lexsort((recv_ok, recv_from[recv_ok], pool_of[recv_ok]))]
        send_ok = send_ok[np.lexsort((send_ok, send_free[send_ok], pool_of[send_ok]))]
        s_pool = pool_of[send_ok]
        s_first = np.searchsorted(s_pool, np.arange(npool))
        s_count = np.bincount(s_pool, minlength=npool)
        r_pool = pool_of[recv_ok]
        r_pos = np.arange(len(recv_ok)) - np.searchsorted(r_pool, r_pool)
        # Pairing: at shift k, every receiver not yet paired asks its pool's sender
        # (its position + k) mod count; a sender takes the first receiver asking it.
        matched = np.zeros(len(recv_ok), bool)
        busy = np.zeros(n, bool)  # sender taken (half duplex: either role taken)
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
            ok &= link[s, r] <= np.maximum(send_free[s], recv_from[r])
            if not full:
                ok &= ~busy[r]
            ok[ok] = (usable[s[ok]] & ~held[r[ok]]).any(1)
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
            got_s, got_r = np.concatenate(got_s), np.concatenate(got_r)
        elif len(cand):
            # Nothing paired: every sender is tried once, busy links included, in the same
            # order. Few receivers can take anything then: only those that some sender of
            # their pool can serve are looked at, and only the proposals that could be
            # taken (`proposals`), then taken in order (`pair_up`).
            starts = s_first[s_count > 0]
            union = np.zeros((npool, W), np.uint64)
            union[s_count > 0] = np.bitwise_or.reduceat(usable[send_ok], starts, axis=0)
            cand = cand[(union[r_pool[cand]] & ~held[recv_ok[cand]]).any(1)]
            got_s, got_r = pair_up(*proposals(cand, send_ok, s_first, s_count, recv_ok, r_pool, r_pos),
                                   recv_ok)
        if not len(got_s):
            # Nothing can move before the next event: a port frees or a piece arrives.
            nxt = np.full(npool, np.inf)
            for times, who in ((send_free, np.arange(n)), (recv_from[needy], np.nonzero(needy)[0]),
                               (pend_t, pend_r)):
                later = times > horizon[pool_of[who]]
                np.minimum.at(nxt, pool_of[who[later]], times[later])
            moved = np.isfinite(nxt) & (t_recv < np.inf)
            if not moved.any():
                raise RuntimeError("min3 round scheduler is stuck (a bug): no event left")
            floor = np.where(moved, np.maximum(floor, nxt - dur_min), floor)
            continue
        s, r = np.asarray(got_s, np.int64), np.asarray(got_r, np.int64)
        q = _first_set_bit_from(usable[s] & ~held[r], start_bit[r])
        d = D - 1 - q
        st = np.maximum.reduce([send_free[s], ready[s, d], link[s, r], after[r],
                                recv_free[r] - early[s, r] * overlap[r]])
        en = st + dur[s, r]
        link[s, r] = np.where(fifo[s, r], en, st + gap[s, r])
        after[r] = st
        sent = st + os_[s, r]
        if full:
            send_free[s], recv_free[r] = sent, en
        else:
            recv_free[s], send_free[s], overlap[s] = sent, np.maximum(arrival[s], sent), False
            recv_free[r], send_free[r], overlap[r] = en, np.maximum(arrival[r], en), True
        ready[r, d] = en
        set_bits(held, r, d)
        need[r] -= 1
        pend_r, pend_d, pend_t = np.r_[pend_r, r], np.r_[pend_d, d], np.r_[pend_t, en]
        plan.extend(ranks[s], ranks[r], d, st, en)
    else:
        raise RuntimeError("min3 round scheduler did not finish (a bug)")
    model.link_free[ix] = np.where(same_pool, link, model.link_free[ix])
    model.send_free[ranks], model.recv_free[ranks] = send_free, recv_free
    model.recv_overlap[ranks], model.recv_after[ranks] = overlap, after
