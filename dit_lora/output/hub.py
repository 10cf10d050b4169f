"""Push a finished run's adapter (and only the adapter's public artefacts) to the Hugging Face Hub.

An output directory also holds ``checkpoint-*`` folders with optimizer state, caches and logs
that can be many GB and may contain private data (captions, local paths). Uploading is therefore
an explicit allow-list: we pick the files ourselves and pass their exact paths to
``upload_folder``, instead of trusting glob semantics (huggingface_hub's ``*`` also crosses ``/``).
"""

from __future__ import annotations

import glob
import logging
import re
from pathlib import Path
from typing import Callable

from dit_lora.errors import UserError

from dit_lora.output.names import (ADAPTER_FILE, ADAPTER_FILES, BACKBONE_FILE, CLASSES_FILE, LOSS_CURVE_FILE,
                                   MODEL_CARD_FILE, PEFT_ADAPTER_FILE, PEFT_CONFIG_FILE, SUMMARY_FILE)

TOP_LEVEL_FILES = (ADAPTER_FILE, PEFT_ADAPTER_FILE, PEFT_CONFIG_FILE, BACKBONE_FILE, CLASSES_FILE, MODEL_CARD_FILE,
                   SUMMARY_FILE, LOSS_CURVE_FILE)
SAMPLES_DIR = "samples"
SAMPLE_SUFFIXES = (".png", ".jpg", ".mp4")  # video-LLM answers (.txt) are in the card itself
DEFAULT_COMMIT_MESSAGE = "Upload LoRA adapter trained with dit-lora"

# Hub user tokens look like hf_XXXX; scrubbed even when they are not the token we were given
# (e.g. a server echoing another credential back in an error body).
_TOKEN_RE = re.compile(r"hf_[A-Za-z0-9]{8,}")


def select_files(output_dir: Path) -> list[str]:
    """Relative POSIX paths of the files that may be published from ``output_dir``.

    Only the top-level artefacts in TOP_LEVEL_FILES and the images/videos directly inside
    ``samples/``. Symlinks pointing outside ``output_dir`` are skipped so a link can never
    smuggle an unrelated file into a public repo.
    """
    root = output_dir.resolve()
    candidates = [output_dir / name for name in TOP_LEVEL_FILES]
    samples = output_dir / SAMPLES_DIR
    if samples.is_dir():
        candidates += sorted(p for p in samples.iterdir() if p.suffix.lower() in SAMPLE_SUFFIXES)
    chosen = []
    for path in candidates:
        if not path.is_file():
            continue
        if not path.resolve().is_relative_to(root):
            continue
        chosen.append(path.relative_to(output_dir).as_posix())
    return chosen


def check_finite(path: Path) -> None:
    """Raise UserError if ``path`` is not a readable safetensors file of finite tensors.

    A NaN/Inf adapter loads fine and then renders black images for everyone who downloads it,
    so it must never reach the Hub. Tensors are read one at a time to bound memory.
    """
    import torch
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():
                tensor = handle.get_tensor(key)
                if tensor.is_floating_point() or tensor.is_complex():
                    if tensor.is_floating_point() and tensor.element_size() == 1:
                        tensor = tensor.float()  # isfinite has no kernels for the float8 dtypes
                    if not bool(torch.isfinite(tensor).all()):
                        bad = int((~torch.isfinite(tensor)).sum())
                        raise UserError(
                            f"refusing to push {path}: tensor '{key}' contains {bad} NaN/Inf value(s), so the "
                            "adapter is broken. Re-train (lower the learning rate or use bf16/fp32 instead of fp16) "
                            "or push an earlier finite checkpoint's weights."
                        )
    except UserError:
        raise
    except Exception as err:
        raise UserError(
            f"cannot read {path} as safetensors ({type(err).__name__}: {err}). The file is truncated or not a "
            "safetensors file; re-export the adapter before pushing."
        ) from None


def scrub(text: str, token: str | None) -> str:
    """Remove ``token`` (and anything shaped like a Hub token) from ``text``."""
    if token:
        text = text.replace(token, "***")
    return _TOKEN_RE.sub("hf_***", text)


class _ScrubFilter(logging.Filter):
    """Redacts the token from huggingface_hub log records emitted while we push.

    A logger's filters only see records created on that exact logger, so the filter is put on
    every handler of the root and huggingface_hub loggers instead (handlers see all records
    that propagate to them).
    """

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        cleaned = scrub(message, self.token)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def _resolve_token(token: str | None) -> str:
    if token:
        return token
    try:
        from huggingface_hub import get_token

        found = get_token()
    except Exception as err:  # e.g. an OIDC exchange that fails
        raise UserError(
            f"could not read a Hugging Face token ({type(err).__name__}). Run `hf auth login` or set the "
            "HF_TOKEN environment variable to a token with write access."
        ) from None
    if not found:
        raise UserError(
            "no Hugging Face token found, so nothing can be pushed. Run `hf auth login` (or set the HF_TOKEN "
            "environment variable) with a token that has write access, then re-run the push."
        )
    return found


def push_adapter(
    output_dir: str | Path,
    hub_model_id: str,
    *,
    private: bool = False,
    commit_message: str | None = None,
    token: str | None = None,
    log: Callable[[str], object] = print,
) -> str:
    """Upload the adapter and its card/samples from ``output_dir`` to the model repo ``hub_model_id``.

    Creates the repo if needed (``private=True`` makes a new repo private; otherwise the owner's
    default visibility applies) and uploads only the allow-listed files (see :func:`select_files`).
    Refuses, before any network call, when the adapter is missing or any weight is NaN/Inf.
    Returns the repo URL. The token is never logged or included in an error message.
    """
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        raise UserError(
            f"output directory {output_dir} does not exist. Pass the --output_dir of a finished training run "
            f"(the folder that contains {ADAPTER_FILE})."
        )
    if not any((output_dir / name).is_file() for name in ADAPTER_FILES):
        raise UserError(
            f"no {ADAPTER_FILE} in {output_dir}, so there is no adapter to push. Point to the output_dir of a "
            "finished run (checkpoint-* folders are not pushable), or let the run finish so it writes the adapter."
        )
    if not re.fullmatch(r"[\w.-]+/[\w.-]+|[\w.-]+", hub_model_id or ""):
        raise UserError(
            f"--hub_model_id {hub_model_id!r} is not a valid repo id; use 'username/repo-name' "
            "(letters, digits, '-', '_', '.')."
        )
    files = select_files(output_dir)
    for name in (*ADAPTER_FILES, BACKBONE_FILE):
        if name in files:
            check_finite(output_dir / name)
    token = _resolve_token(token)

    import huggingface_hub
    from huggingface_hub import HfApi, constants

    if constants.HF_HUB_OFFLINE:
        raise UserError(
            "HF_HUB_OFFLINE is set, so the Hub cannot be reached. Unset HF_HUB_OFFLINE and re-run the push."
        )

    log(f"pushing {len(files)} file(s) from {output_dir} to {hub_model_id}: {', '.join(files)}")
    scrub_filter = _ScrubFilter(token)
    handlers = logging.getLogger().handlers + logging.getLogger(huggingface_hub.__name__).handlers
    for handler in handlers:
        handler.addFilter(scrub_filter)
    try:
        api = HfApi(token=token)
        repo_url = api.create_repo(hub_model_id, token=token, private=True if private else None,
                                   repo_type="model", exist_ok=True)
        commit = api.upload_folder(
            repo_id=hub_model_id,
            folder_path=str(output_dir),
            repo_type="model",
            token=token,
            # Exact paths, glob-escaped: a file literally named "a[1].png" must match only itself.
            allow_patterns=[glob.escape(f) for f in files],
            commit_message=commit_message or DEFAULT_COMMIT_MESSAGE,
        )
    except Exception as err:
        raise UserError(_describe_failure(err, hub_model_id, token)) from None
    finally:
        for handler in handlers:
            handler.removeFilter(scrub_filter)
    url = str(repo_url)
    log(f"pushed to {url} ({scrub(str(getattr(commit, 'commit_url', '')), token)})")
    return url


def _describe_failure(err: Exception, repo_id: str, token: str) -> str:
    """One scrubbed paragraph for a failed create_repo/upload, with a fix for the usual causes."""
    status = getattr(getattr(err, "response", None), "status_code", None)
    detail = scrub(" ".join(f"{type(err).__name__}: {err}".split()), token)
    if len(detail) > 600:
        detail = detail[:600] + "..."
    if status == 401:
        fix = "the token is invalid or expired: run `hf auth login` again (or update HF_TOKEN)."
    elif status == 403:
        fix = (f"the token cannot write to {repo_id}: use a token with write access, or a repo id under your own "
               "username or an organization you can write to.")
    elif status is not None and status >= 500:
        fix = "the Hub had a server error; wait a minute and re-run the same push (it is safe to repeat)."
    else:
        fix = "check the repo id, your network connection and token, then re-run the push (it is safe to repeat)."
    return f"pushing to the Hub repo {repo_id} failed (HTTP {status or 'n/a'}): {detail} Fix: {fix}"
