"""``dit-lora caption``, start to end: list, decide what to caption, load, caption in batches, write, report.

Nothing is loaded before the folder is listed and what it holds is judged (a folder with every file captioned
ends in a second). Files are decoded on threads one batch ahead of the model. A file that cannot be decoded is
named and skipped; the run ends with what was written, kept and failed, and the caption checks
(:mod:`.checks`); it exits 1 when a file failed, so a script notices.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from dit_lora.captioning.captioner import Captioner, captioner_config, load_captioner
from dit_lora.captioning.checks import CaptionFacts, caption_report
from dit_lora.captioning.media import MediaFile, list_media, read_media
from dit_lora.captioning.memory import caption_memory, gib
from dit_lora.captioning.options import CaptionOptions
from dit_lora.captioning.writer import METADATA, CaptionStore, caption_path
from dit_lora.core.errors import Interrupted, UserError
from dit_lora.core.fileio import check_writable, reporting_disk_full
from dit_lora.core.progress import Progress, say
from dit_lora.data.caption_files import clean_caption
from dit_lora.data.paths import printable
from dit_lora.families.videollm.frames import SampledClip

__all__ = ["TOO_LARGE", "Outcome", "caption_folder"]

#: failed files named one by one in the summary
NAMED_FAILURES = 10
#: decoding threads
DECODE_THREADS = 4


@dataclass
class Outcome:
    """What a run did: captions written (key -> text as written), files kept as they were, failures (key, why)."""

    written: dict[str, str]
    kept: int
    resumed: dict[str, str]
    failed: list[tuple[str, str]]


def _plan_work(options: CaptionOptions, store: CaptionStore, media: list[MediaFile]) -> tuple[list[MediaFile], int]:
    """The files to caption now (images first, then clips, each in name order: a batch holds one kind), and how
    many already have a caption that stays. What an interrupted run's journal says is done counts only for files
    still listed, whose caption file (``.txt`` mode) is still there: one deleted since is captioned again."""
    if not options.metadata:
        _refuse_shared_caption_files(options, media)
    listed = {item.key: item for item in media}
    store.resumed = {
        key: text
        for key, text in store.resumed.items()
        if key in listed and (options.metadata or caption_path(listed[key].path, options.caption_extension).is_file())
    }
    todo, kept = [], 0
    for item in media:
        if item.key in store.resumed:
            continue
        if not options.overwrite and store.has_caption(item.key, item.path):
            kept += 1
            continue
        todo.append(item)
    return sorted(todo, key=lambda item: item.kind != "image"), kept


def _refuse_shared_caption_files(options: CaptionOptions, media: list[MediaFile]) -> None:
    """Two files whose captions would be one file (``a.png`` and ``a.mp4`` -> ``a.txt``): training would give both
    the one caption. One paragraph naming them."""
    owners: dict[Path, list[str]] = {}
    for item in media:
        owners.setdefault(caption_path(item.path, options.caption_extension), []).append(item.key)
    shared = [(path, keys) for path, keys in owners.items() if len(keys) > 1]
    if shared:
        named = "; ".join(f"{' and '.join(printable(k) for k in keys)} -> {path.name}" for path, keys in shared[:5])
        raise UserError(
            f"dit-lora caption: {len(shared)} caption file(s) would each belong to several files ({named}"
            f"{' and more' if len(shared) > 5 else ''}): training reads one caption file per name, so those files "
            "would share a caption. Rename one of each, or pass --metadata (one row per file)."
        )


def _say_listing(
    media: list[MediaFile], todo: list[MediaFile], kept: int, store: CaptionStore, options: CaptionOptions
) -> None:
    images = sum(m.is_image for m in media)
    say(f"{store.root}: {len(media)} file(s) ({images} image(s), {len(media) - images} clip(s))")
    if store.resumed:
        torn = (
            " (the kill cut its last line: that file is captioned again, or kept if its caption file was written)"
            if store.dropped_torn_line
            else ""
        )
        say(f"resuming: {len(store.resumed)} file(s) captioned by the interrupted run are kept{torn}")
    if kept:
        say(f"kept: {kept} file(s) already have a caption, left as they are (--overwrite replaces them)")
    if store.copied:
        say(
            f"copied: {len(store.copied)} of them have only a {options.caption_extension} caption, which training "
            f"would not read beside {METADATA}: it is copied into a row of it, as written"
        )
    if options.overwrite:
        replaced = sum(store.has_caption(item.key, item.path) for item in todo)
        if replaced:
            say(f"replacing: {replaced} existing caption(s) (--overwrite)")
    say(f"to caption: {len(todo)} file(s)")
    if options.max_pixels and todo:
        say(
            f"frames larger than {options.max_pixels:,} pixels (--max_pixels) are scaled down for the captioner, "
            "aspect kept; your files are not changed (--max_pixels 0: full size)"
        )


def _check_fits(captioner_cfg, options: CaptionOptions, device: torch.device) -> None:
    """Say the memory the captioner takes; on a GPU with less free memory, say what to change (an estimate: the run
    goes on; a batch out of memory is captioned file by file, :func:`_generated`)."""
    memory = caption_memory(captioner_cfg, options.batch_size, options.max_new_tokens, options.max_pixels)
    say(memory.line(gpu=device.type == "cuda"))
    if device.type != "cuda":
        return
    free, _ = torch.cuda.mem_get_info(device)
    if memory.total > free:
        say(
            f"warning: the captioner needs about {gib(memory.total)} and {device} has {gib(free)} free: it will "
            "likely run out of memory. Load the language model in 4 bits (--quantize_base nf4: a 7B-8B captioner "
            "then fits a 16 GB card), or lower --batch_size, --num_frames or --max_pixels."
        )


def _decoded(items: list[MediaFile], options: CaptionOptions, pool: ThreadPoolExecutor) -> Iterator[list]:
    """Batches of ``(item, clip or the reason it failed)``, one batch decoding ahead of the one being captioned;
    a batch holds one kind (images or clips: a model batches frames of one count)."""
    batches = _batches(items, options.batch_size)
    ahead: list[tuple[MediaFile, Future]] | None = None
    for batch in [*batches, None]:
        submitted = (
            None
            if batch is None
            else [(i, pool.submit(read_media, i, options.num_frames, options.max_pixels)) for i in batch]
        )
        if ahead is not None:
            yield [(item, _result(future)) for item, future in ahead]
        ahead = submitted


def _result(future: Future) -> SampledClip | str:
    try:
        return future.result()
    except (ValueError, OSError, UserError) as err:
        return str(err) or type(err).__name__


def _batches(items: list[MediaFile], size: int) -> list[list[MediaFile]]:
    batches: list[list[MediaFile]] = []
    for item in items:
        if batches and len(batches[-1]) < size and batches[-1][0].kind == item.kind:
            batches[-1].append(item)
        else:
            batches.append([item])
    return batches


def _caption_batch(
    captioner: Captioner, options: CaptionOptions, batch: list, outcome: Outcome, facts: list[CaptionFacts]
) -> list[tuple[str, Path, str]]:
    """Caption one decoded batch: a file that failed to decode, or whose prompt cannot be built (a clip without a
    frame rate for Qwen3-VL, which writes each frame's time), is recorded as failed, the others captioned."""
    prepared = []
    for item, clip in batch:
        if isinstance(clip, str):
            outcome.failed.append((item.key, clip))
            continue
        try:
            prepared.append((item, captioner.prompt_inputs(clip, options.prompt_for(item))))
        except (UserError, ValueError) as err:  # e.g. Qwen3-VL and a clip without times, a 4 x 1000 banner for Qwen
            outcome.failed.append((item.key, str(err).split(". ")[0] or type(err).__name__))
    if not prepared:
        return []
    rows = []
    for (item, _), result in _generated(captioner, prepared, outcome):
        said, removed = clean_caption(result.text)  # training refuses control bytes: none are written
        if removed and not said.strip():
            outcome.failed.append((item.key, f"the captioner wrote no text, only {removed} control character(s)"))
            continue
        text = f"{options.prefix}{said.strip()}{options.suffix}"
        facts.append(CaptionFacts(item.key, text, result.finished, removed))
        rows.append((item.key, item.path, text))
    return rows


def _generated(captioner: Captioner, prepared: list, outcome: Outcome) -> list:
    """``(item, inputs), caption`` pairs of one batch; a batch that runs out of device memory is captioned one file at
    a time, and a file that does not fit alone fails (named), the others go on. When the first file tried alone does
    not fit and nothing was captioned yet, nothing will: one paragraph, no grinding through the folder."""
    try:
        return list(zip(prepared, captioner.generate([inputs for _, inputs in prepared])))
    except torch.OutOfMemoryError:
        if len(prepared) > 1:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            return [pair for one in prepared for pair in _generated(captioner, [one], outcome)]
    if not outcome.written and not any(why == TOO_LARGE for _, why in outcome.failed):
        raise UserError(
            f"dit-lora caption: out of device memory captioning {printable(prepared[0][0].key)} alone, before any "
            f"caption was written. {TOO_LARGE[TOO_LARGE.index(':') + 2 :].capitalize()}, or free the device "
            "(another process may hold it), and run the same command again."
        )
    outcome.failed.append((prepared[0][0].key, TOO_LARGE))
    return []


#: why a file failed that does not fit the device alone
TOO_LARGE = "out of device memory even alone: lower --max_pixels or --num_frames, or use --quantize_base nf4"

#: the loaders' words for training's flags -> this command's
_FLAGS = {"--pretrained_model_name_or_path": "--model", "Point load_adapter at": "Point --adapter at"}


@contextmanager
def _in_caption_words() -> Iterator[None]:
    """A loader's refusal written for ``dit-lora train`` (the model loads through the family's own code), with this
    command's flag names."""
    try:
        yield
    except UserError as err:
        text = str(err)
        for training, here in _FLAGS.items():
            text = text.replace(training, here)
        err.args = (text, *err.args[1:])
        raise


def caption_folder(options: CaptionOptions) -> Outcome:
    """Caption ``options.path`` as the options say; returns what was done (the command prints the summary)."""
    root, media = list_media(options.path, say)
    if options.metadata and options.path.is_file():
        raise UserError(
            "dit-lora caption --metadata writes the folder's metadata.jsonl, with every file's path from the folder "
            "training reads: pass that folder, not one file (or leave --metadata out to write a caption file)."
        )
    store = CaptionStore(
        root,
        extension=options.caption_extension,
        metadata=options.metadata,
        options=options.journal_options(),
        subfolders=options.path.is_dir(),
    )
    if not options.dry_run:  # before anything is written or loaded: a read-only folder costs a second
        check_writable(root, "PATH", " Or pass --dry_run to see the captions without writing them.")
        store.lock()
    try:
        return _caption_held(options, store, media)
    finally:
        store.release()


def _caption_held(options: CaptionOptions, store: CaptionStore, media: list[MediaFile]) -> Outcome:
    """The run, once the folder is held: resume, decide, load, caption, finish."""
    if not options.dry_run:
        store.resume()
    todo, kept = _plan_work(options, store, media)
    if options.dry_run:
        todo = todo[: options.dry_run]
    _say_listing(media, todo, kept, store, options)
    outcome = Outcome({}, kept, dict(store.resumed), [])
    if not todo:
        if not options.dry_run:
            store.finish({**store.copied, **store.resumed}, complete=True)
        return outcome
    device = options.torch_device()
    with _in_caption_words():
        cfg = captioner_config(
            options.model_path(),
            family=options.family,
            quantize_base=options.quantize_base,
            mixed_precision=options.mixed_precision,
            num_frames=options.num_frames,
        )
        _check_fits(cfg, options, device)
        captioner = load_captioner(cfg, device, options.adapter, options.max_new_tokens)
    say(
        f"captioner: {cfg.model.family} from {cfg.model.pretrained_model_name_or_path}"
        + (f" with the adapter {options.adapter}" if options.adapter else "")
        + f", on {device}"
    )
    facts = _run_batches(captioner, options, todo, store, outcome)
    if not options.dry_run:
        store.finish({**store.copied, **outcome.resumed, **outcome.written}, complete=not outcome.failed)
    earlier = [CaptionFacts(key, text) for key, text in outcome.resumed.items()]  # the resumed run's, as written
    for line in caption_report(earlier + facts, max_new_tokens=options.max_new_tokens):
        say(line)
    return outcome


def _run_batches(
    captioner: Captioner, options: CaptionOptions, todo: list[MediaFile], store: CaptionStore, outcome: Outcome
) -> list[CaptionFacts]:
    facts: list[CaptionFacts] = []
    progress = Progress(len(todo), desc="captioning", unit="file")
    advice = "The captions written so far are kept: free some space and run the same command again to caption the rest."
    try:
        with ThreadPoolExecutor(DECODE_THREADS) as pool:
            for batch in _decoded(todo, options, pool):
                rows = _caption_batch(captioner, options, batch, outcome, facts)
                if options.dry_run:
                    for key, _, text in rows:
                        say(f"{printable(key)}: {printable(text)}")
                elif rows:
                    with reporting_disk_full("captions", store.root, advice=advice):
                        store.write(rows)
                outcome.written.update({key: text for key, _, text in rows})
                progress.update(len(batch))
    except KeyboardInterrupt:
        if not options.dry_run:
            # metadata.jsonl gets what is written so far; the journal stays for the rerun
            store.finish({**store.copied, **outcome.resumed, **outcome.written}, complete=False)
        kept = "nothing was written (--dry_run)" if options.dry_run else "they are kept"
        raise Interrupted(
            f"interrupted (Ctrl-C) after {len(outcome.written)} caption(s) of {len(todo)}; {kept}. Run the same "
            "command again to caption the rest (exit 130).",
            130,
        ) from None
    finally:
        progress.close()
    return facts
