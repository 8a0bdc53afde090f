"""A camera run's summary as a person reads it (what ``edgert camera`` and ``edgert demo``
print), and what went wrong in a run that finished, as sentences and an exit code."""

from __future__ import annotations


def print_summary(s: dict) -> None:
    print(
        f"frames {s['frames_processed']} processed, {s['frames_dropped']} dropped, {s['fps']:.1f} fps over {s['seconds']:.1f} s ({s['backend']})"
    )
    for name, v in s["latency_ms"].items():
        print(
            f"  {name:<12} p50 {v['p50']:8.2f}  p90 {v['p90']:8.2f}  p99 {v['p99']:8.2f}  max {v['max']:8.2f} ms"
        )
    streams = s.get("streams") or []
    _print_streams(s, streams)
    labels = labels_line(s)
    if labels:
        print(labels)
    from .features import summary_lines

    for line in summary_lines(s, first=True):  # each camera feature's (power)
        print(line)
    _print_outputs(s)
    for line in files_lines(s.get("files") or []):
        print(line)
    for line in summary_lines(s, first=False):  # (counts, the gate, the second stage)
        print(line)
    for st in streams:
        if st.get("images_failed"):
            print(
                f"stream {st['stream']}: {st['images_failed']} images could not be read: "
                + ", ".join(st["images_failed_files"][:5])
            )


def _print_streams(s: dict, streams: list) -> None:
    """Each stream's line (when there are several), and each one's reconnects and stalls."""
    if len(streams) > 1:
        b = s["batch"]
        hist = ", ".join(f"{k}: {v}" for k, v in b["histogram"].items())
        print(f"batches {b['batches']}, mean size {b['mean']:.2f} of {b['max']} (sizes {hist})")
        for st in streams:
            e2e = st["latency_ms"].get("end_to_end", {})
            print(
                f"  [{st['stream']}] {st['frames_processed']:>6} processed {st['frames_dropped']:>6} dropped "
                f"{st['fps']:6.1f} fps  e2e p50 {e2e.get('p50', 0):7.1f} p99 {e2e.get('p99', 0):7.1f} ms  "
                f"{st['status']}  {st['source']}"
            )
    elif streams and streams[0]["status"].startswith("failed"):
        print(f"  stream {streams[0]['status']}")
    for st in streams:
        if "reconnects" in st and (st["reconnects"] or st["stalls"] or st["downtime_s"]):
            where = f"[{st['stream']}] " if len(streams) > 1 else ""
            print(
                f"{where}{st['decoder']}: {st['reconnects']} reconnects, {st['stalls']} stalls, "
                f"{st['downtime_s']:.1f} s without frames (last: {st['last_error']})"
            )


def labels_line(s: dict) -> str | None:
    """What the frames showed: a detector's objects by label (every box of every inferred
    frame), else a classifier's frames by their top label; None when neither."""
    frames = s.get("labels_frames")
    of = f" (in {frames:,} frames inferred)" if frames is not None else ""
    objects = s.get("objects_by_label")
    if objects:
        shown = list(objects.items())[:10]
        more = f", and {len(objects) - 10} more labels" if len(objects) > 10 else ""
        return "objects by label: " + ", ".join(f"{k} {n:,}" for k, n in shown) + more + of
    if s.get("labels_seen"):
        top = ", ".join(f"{k} {n:,}" for k, n in s["labels_seen"].items())
        return "frames by their top label: " + top + of
    return None


def _print_outputs(s: dict) -> None:
    for out in _flat(s.get("outputs") or []):
        if out.get("output") == "mqtt":
            print(f"mqtt {out['broker']}: {mqtt_counts(out)}")
        if out.get("letterboxed"):
            print(
                f"{out['output']}: {out['letterboxed']} of {out['frames']} frames letterboxed "
                "(their size differs from the first frame's)"
            )


CODECS = {"h264": "H.264", "mp4v": "MPEG-4 Part 2 (mp4v: browsers do not play it)"}


def files_lines(files: list) -> list[str]:
    """Where the run's files went and what they hold (the summary's ``files``), a line each
    under "files written:"; none when nothing was written."""
    if not files:
        return []
    lines = ["files written:"]
    for f in files:
        kind, path = f["output"], f["path"]
        if kind == "video":
            held = [f"{f['frames']:,} frames", CODECS.get(f["codec"], f["codec"])]
        elif kind == "jsonl":
            held = [f"{f['frames']:,} frames"]
        elif kind == "events":
            held = [f"{f['events']:,} events"]
        elif kind == "store":
            rate = f" ({size(f['per_hour'])} an hour)" if f["seconds"] >= 600 else ""
            held = [
                f"{f['events']:,} events, {f['tracks']:,} tracks",
                f"{size(f['written'])} written{rate}",
            ]
        else:  # a folder: snapshots, clips
            path = path.rstrip("/") + "/"
            what = "picture" if kind == "snapshots" else "clip"
            held = [f"{f['files']:,} {what}{'' if f['files'] == 1 else 's'}"]
            if f.get("crops"):
                held[0] += f" and {f['crops']:,} crops"
        held.append(size(f["bytes"]))
        if f.get("deleted"):
            held.append(f"{f['deleted']:,} older deleted by retention")
        lines.append(f"  {kind:<9} {path} ({', '.join(held)})")
    return lines


def size(n: int) -> str:
    """Bytes as a person reads them: 512 B, 12.3 kB, 4.5 MB, 1.2 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _flat(reports: list) -> list:
    return [r for item in reports for r in (item if isinstance(item, list) else [item])]


def mqtt_counts(out: dict) -> str:
    """The MQTT line of the summary: what was delivered, and each way an event was lost."""
    parts = [f"{out['events']} events", f"{out['delivered']} delivered"]
    if out["dropped"]:
        parts.append(f"{out['dropped']} dropped from the full buffer while the broker was away")
    if out.get("refused"):
        parts.append(f"{out['refused']} refused by the broker")
    if out["buffered"]:
        parts.append(f"{out['buffered']} undelivered at the end")
    if out.get("backpressure_s"):
        parts.append(f"{out['backpressure_s']:.1f} s waited for the broker")
    return ", ".join(parts) + (
        f" (last error: {out['last_error']})"
        if out.get("last_error") and out["delivered"] < out["events"]
        else ""
    )


def problems(s: dict) -> tuple[list[str], int]:
    """What went wrong in a run that finished, as sentences for stderr, and the exit code: 2
    when an output failed (or events never reached the MQTT broker), else 1 when a source
    gave less than it should (a stream that delivered no frame or was lost, images that could
    not be read), else 0."""
    from edgert.apps.telemetry.mqtt import lost

    lines = list(s.get("output_errors") or [])
    for out in _flat(s.get("outputs") or []):
        if out.get("output") == "mqtt" and lost(out):
            lines.append(
                f"mqtt {out['broker']}: {lost(out)} of {out['events']} events were not "
                f"delivered ({out.get('last_error') or 'see the summary'})"
            )
    sources = stream_problems(s)
    failed = sum(st.get("images_failed", 0) for st in s.get("streams") or [])
    if failed:
        sources.append(f"{failed} images could not be read and were skipped (named in the summary)")
    return lines + sources, (2 if lines else 1 if sources else 0)


def stream_problems(s: dict) -> list[str]:
    """A sentence for each stream that delivered no frame (it failed, or was still connecting
    when the run ended) or was lost and never came back, while the others ran; a stream told to
    reconnect for ever (``--reconnect forever``: a camera that reboots) is not one."""
    out = []
    for st in s.get("streams") or []:
        name = f"stream {st['stream']} ({st['source']})"
        status, frames = st.get("status", ""), st.get("frames_processed", 0)
        if status == "removed":  # a reload took its camera away: nothing was owed
            continue
        if status.startswith("failed"):
            why = status.split(": ", 1)[-1]
            if frames:
                out.append(f"{name} was lost after {frames} frames and did not come back: {why}")
            else:
                out.append(f"{name} delivered no frame: {why}; the other streams ran")
        elif not frames and st.get("reconnect") not in ("forever", None) and "stopped" not in s:
            out.append(
                f"{name} delivered no frame in {s.get('seconds', 0):.1f} s (still "
                f"{st.get('connection') or 'connecting'} when the run ended)"
            )
    return out
