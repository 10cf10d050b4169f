"""Push a finished run's adapter (and only the adapter's public artefacts) to the Hugging Face Hub.

An output directory also holds ``checkpoint-*`` folders with optimizer state, caches and logs
that can be many GB and may contain private data (captions, local paths). Uploading is therefore
an explicit allow-list: we pick the files ourselves and pass their exact paths to
``upload_folder``, instead of trusting glob semantics (huggingface_hub's ``*`` also crosses ``/``).
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import tempfile
from collections.abc import Callable
from pathlib import Path

from dit_lora.config.schema import HubOptions
from dit_lora.core.errors import UserError
from dit_lora.output.adapter import adapter_index
from dit_lora.output.ema_adapter import ema_files
from dit_lora.output.export import written_by_export
from dit_lora.output.names import (
    ADAPTER_FILE,
    ADAPTER_FILES,
    ADAPTER_INDEX_FILE,
    BACKBONE_FILE,
    CARD_INPUT_FILE,
    CLASSES_FILE,
    LOSS_CURVE_FILE,
    MODEL_CARD_FILE,
    PEFT_ADAPTER_FILE,
    PEFT_CONFIG_FILE,
    SUMMARY_FILE,
)

TOP_LEVEL_FILES = (
    ADAPTER_FILE,
    PEFT_ADAPTER_FILE,
    PEFT_CONFIG_FILE,
    BACKBONE_FILE,
    CLASSES_FILE,
    MODEL_CARD_FILE,
    SUMMARY_FILE,
    LOSS_CURVE_FILE,
    CARD_INPUT_FILE,
)

SAMPLES_DIR = "samples"
SAMPLE_SUFFIXES = (".png", ".jpg", ".mp4")  # video-LLM answers (.txt) are in the card itself
DEFAULT_COMMIT_MESSAGE = "Upload LoRA adapter trained with dit-lora"

# Hub user tokens look like hf_XXXX; scrubbed even when they are not the token we were given
# (e.g. a server echoing another credential back in an error body).
_TOKEN_RE = re.compile(r"hf_[A-Za-z0-9]{8,}")


def run_adapter_files(output_dir: Path) -> list[str]:
    """The adapter files of a run beyond the standard names: the adapter index (``dit_lora_adapter_files.json``),
    the files it lists (Wan A14B: one per expert), and export files dit-lora wrote (their metadata says so)."""
    names = []
    if (output_dir / ADAPTER_INDEX_FILE).is_file():
        names = [ADAPTER_INDEX_FILE] + [e["file"] for e in adapter_index(output_dir) or []]
    names += sorted(p.name for p in output_dir.glob("*.safetensors") if p.name not in names and written_by_export(p))
    return names


def select_files(output_dir: Path) -> list[str]:
    """Relative POSIX paths of the files that may be published from ``output_dir``.

    Only the top-level artefacts in TOP_LEVEL_FILES, the run's further adapter files (:func:`run_adapter_files`)
    and the images/videos directly inside ``samples/``. Symlinks pointing outside ``output_dir`` are skipped so a link can never
    smuggle an unrelated file into a public repo.
    """
    root = output_dir.resolve()
    candidates = [output_dir / name for name in TOP_LEVEL_FILES]
    candidates += [output_dir / name for name in run_adapter_files(output_dir) if name not in TOP_LEVEL_FILES]
    outputs = (MODEL_CARD_FILE, SUMMARY_FILE, LOSS_CURVE_FILE)
    candidates += ema_files(output_dir, [p.name for p in candidates if p.name not in outputs])  # --use_ema's
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
            for key in handle.keys():  # noqa: SIM118 - safe_open has keys(), no iteration
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
    if not any((output_dir / name).is_file() for name in ADAPTER_FILES) and not run_adapter_files(output_dir):
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
    for name in files:
        if name.endswith(".safetensors"):
            check_finite(output_dir / name)
    token = _resolve_token(token)

    import huggingface_hub
    from huggingface_hub import CommitOperationAdd, HfApi, constants

    if constants.HF_HUB_OFFLINE:
        raise UserError(
            "HF_HUB_OFFLINE is set, so the Hub cannot be reached. Unset HF_HUB_OFFLINE and re-run the push."
        )

    card = repo_card(output_dir, hub_model_id, log) if MODEL_CARD_FILE in files else None
    log(f"pushing {len(files)} file(s) from {output_dir} to {hub_model_id}: {', '.join(files)}")
    scrub_filter = _ScrubFilter(token)
    handlers = logging.getLogger().handlers + logging.getLogger(huggingface_hub.__name__).handlers
    for handler in handlers:
        handler.addFilter(scrub_filter)
    try:
        api = HfApi(token=token)
        repo_url = api.create_repo(
            hub_model_id, token=token, private=True if private else None, repo_type="model", exist_ok=True
        )
        # Exact paths, one operation each (never a glob); the card as written for this repo (repo_card)
        operations = [
            CommitOperationAdd(
                path_in_repo=name,
                path_or_fileobj=card.encode() if name == MODEL_CARD_FILE and card else str(output_dir / name),
            )
            for name in files
        ]
        commit = api.create_commit(
            repo_id=hub_model_id,
            operations=operations,
            repo_type="model",
            token=token,
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


def repo_card(output_dir: Path, repo_id: str, log: Callable[[str], object] = print) -> str | None:
    """The model card of the run in ``output_dir`` written for the Hub repo ``repo_id``: its snippet loads the adapter
    from the repo and the base model by its Hub id (a local base folder said plainly: ``report.card_base``), never a
    path on this machine. Rebuilt from ``train_summary.json`` (the run's resolved options); None, and the README
    pushed as it is, for a folder without that record. The local README.md is not changed."""
    from dit_lora.config import TrainConfig
    from dit_lora.output.report import write_model_card
    from dit_lora.registry import get_spec

    try:
        summary = json.loads((output_dir / SUMMARY_FILE).read_text())
        # use_dora, diffusers' alias, was resolved into lora_type when the run started (and recorded false)
        values = {k: v for k, v in summary["config"].items() if k != "use_dora"} | {"hub_model_id": repo_id}
        cfg = TrainConfig.for_family(summary["family"], **values)
        spec = get_spec(summary["family"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        log(
            f"card: {MODEL_CARD_FILE} pushed as the run wrote it ({SUMMARY_FILE} gives no run to write it for "
            f"{repo_id} from: {type(err).__name__})"
        )
        return None
    samples = [output_dir / SAMPLES_DIR / Path(p).name for p in summary.get("samples") or []]
    with tempfile.TemporaryDirectory() as tmp:
        text = write_model_card(spec, cfg, Path(tmp), summary, [p for p in samples if p.is_file()]).read_text()
    log(
        f"card: the pushed {MODEL_CARD_FILE} loads the adapter from {repo_id} (the local one, from {output_dir}, "
        "is unchanged)"
    )
    return text


def _describe_failure(err: Exception, repo_id: str, token: str) -> str:
    """One scrubbed paragraph for a failed create_repo/upload, with a fix for the usual causes."""
    status = getattr(getattr(err, "response", None), "status_code", None)
    detail = scrub(" ".join(f"{type(err).__name__}: {err}".split()), token)
    if len(detail) > 600:
        detail = detail[:600] + "..."
    if status == 401:
        fix = "the token is invalid or expired: run `hf auth login` again (or update HF_TOKEN)."
    elif status == 403:
        fix = (
            f"the token cannot write to {repo_id}: use a token with write access, or a repo id under your own "
            "username or an organization you can write to."
        )
    elif status is not None and status >= 500:
        fix = "the Hub had a server error; wait a minute and re-run the same push (it is safe to repeat)."
    else:
        fix = "check the repo id, your network connection and token, then re-run the push (it is safe to repeat)."
    return f"pushing to the Hub repo {repo_id} failed (HTTP {status or 'n/a'}): {detail} Fix: {fix}"


def push_command(output_dir: str | Path, hub_model_id: str, private: bool = False) -> str:
    """The command that pushes a finished run later: ``dit-lora push OUTPUT_DIR --hub_model_id ID``, each word
    quoted for a POSIX shell (a folder with spaces or ``$`` is pasted as it is, not split or expanded)."""
    words = ["dit-lora", "push", str(output_dir), "--hub_model_id", hub_model_id] + (["--private"] if private else [])
    return shlex.join(words)


def _can_write(whoami: dict, namespace: str, repo_id: str) -> str | None:
    """Why the token of ``whoami`` cannot create or write ``repo_id`` in ``namespace`` (None: it can, or we cannot
    tell). Classic tokens carry a role (read/write); fine-grained ones list ``repo.write`` per user, org or repo."""
    token = (whoami.get("auth") or {}).get("accessToken") or {}
    role = token.get("role")
    user = whoami.get("name")
    orgs = {o.get("name"): o.get("roleInOrg") for o in whoami.get("orgs") or [] if isinstance(o, dict)}
    if role == "read":
        return "the token is read-only (role `read`)"
    if namespace != user and namespace not in orgs:
        return f"`{namespace}` is neither the token's user (`{user}`) nor one of its organizations"
    if orgs.get(namespace) == "read":
        return f"the token's user only has the `read` role in the organization `{namespace}`"
    if role == "fineGrained":
        scoped = (token.get("fineGrained") or {}).get("scoped") or []
        for scope in scoped:
            entity = scope.get("entity") or {}
            if entity.get("name") in (namespace, repo_id) and "repo.write" in (scope.get("permissions") or []):
                return None
        return f"the fine-grained token has no `repo.write` permission on `{namespace}` or `{repo_id}`"
    return None


def check_push(hub_model_id: str, *, token: str | None = None) -> None:
    """Check, before training, that a push to ``hub_model_id`` can happen; raise :class:`UserError` saying why not.

    In order: not offline (``HF_HUB_OFFLINE``), a token present, the Hub reachable and the token valid
    (``whoami``), and the repository writable: ``auth_check(write=True)`` when it exists, else creatable in its
    namespace by this token (role, organization role, fine-grained ``repo.write``). Creates nothing: a repo made at
    start would stay empty (and visible) when the run fails. The token never appears in a message.
    """
    if not re.fullmatch(r"[\w.-]+/[\w.-]+|[\w.-]+", hub_model_id or ""):
        raise UserError(
            f"--hub_model_id {hub_model_id!r} is not a valid repo id; use 'username/repo-name' "
            "(letters, digits, '-', '_', '.')."
        )
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    if constants.HF_HUB_OFFLINE:
        raise UserError("HF_HUB_OFFLINE is set, so the Hub cannot be reached to push at the end of the run.")
    token = _resolve_token(token)
    api = HfApi(token=token)
    try:
        whoami = api.whoami(token=token)
    except HfHubHTTPError as err:
        status = getattr(err.response, "status_code", None)
        if status == 401:
            raise UserError(
                "the Hugging Face token is invalid or expired (the Hub answered 401 to `whoami`): run "
                "`hf auth login` again or update HF_TOKEN."
            ) from None
        raise UserError(
            f"the Hub at {constants.ENDPOINT} answered HTTP {status} to `whoami`: {scrub(str(err), token)[:300]}"
        ) from None
    except Exception as err:  # connection refused, DNS, TLS, timeout: httpx's and requests' errors alike
        raise UserError(
            f"the Hub at {constants.ENDPOINT} cannot be reached ({type(err).__name__}: {scrub(str(err), token)[:200]})."
        ) from None
    namespace = hub_model_id.split("/")[0] if "/" in hub_model_id else whoami.get("name", "")
    repo_id = hub_model_id if "/" in hub_model_id else f"{namespace}/{hub_model_id}"
    try:
        api.auth_check(repo_id, repo_type="model", token=token, write=True)
        return  # exists and this token may write it
    except RepositoryNotFoundError:
        pass  # not there (or private to someone else): it must be creatable in its namespace
    except HfHubHTTPError as err:
        status = getattr(err.response, "status_code", None)
        if status in (401, 403):
            raise UserError(f"the token cannot write to the existing repository {repo_id} (HTTP {status}).") from None
        if status != 404:  # a Hub without the auth-check route answers 404 too: judge by the namespace below
            raise UserError(f"the Hub answered HTTP {status} when checking write access to {repo_id}.") from None
    reason = _can_write(whoami, namespace, repo_id)
    if reason:
        raise UserError(f"{repo_id} does not exist and cannot be created with this token: {reason}.")


def _hub_model_id(hub: HubOptions) -> str:
    """``hub.hub_model_id``: the parser refuses ``--push_to_hub`` without one; this says so to a caller that did
    not parse."""
    if not hub.hub_model_id:
        raise UserError("--push_to_hub needs --hub_model_id (e.g. `me/my-sana-lora`).")
    return hub.hub_model_id


def preflight_push(hub: HubOptions, output_dir: str | Path) -> str | None:
    """The start-of-run check of ``--push_to_hub`` (``hub``: the run's ``cfg.hub``): None when the push can happen;
    else a stop, or with ``--push_later_ok`` the warning to print (the run goes on and ends with the ``dit-lora
    push`` command)."""
    repo = _hub_model_id(hub)
    try:
        check_push(repo)
    except UserError as err:
        reason = str(err).rstrip(".")
        later = push_command(output_dir, repo, hub.hub_private)
        if not hub.push_later_ok:
            raise UserError(
                f"--push_to_hub cannot push to {hub.hub_model_id}: {reason}. Nothing was trained. Fix that (a token "
                "with write access: `hf auth login` or HF_TOKEN; network access to the Hub; a --hub_model_id you can "
                "write), or add --push_later_ok to train now and push afterwards with `" + later + "`."
            ) from None
        return (
            f"warning: --push_to_hub cannot push to {hub.hub_model_id} now: {reason}. Training anyway "
            f"(--push_later_ok); the push is tried at the end, and if it fails, run `{later}` later."
        )
    return None


def push_after_run(output_dir: str | Path, hub: HubOptions, log: Callable[[str], object] = print) -> None:
    """The end-of-run push to ``hub.hub_model_id`` (``hub``: the run's ``cfg.hub``). A failure names the ``dit-lora
    push`` command that retries it; with ``--push_later_ok`` it is a warning (the adapter is saved; the run
    succeeded), otherwise the run's error."""
    repo = _hub_model_id(hub)
    later = push_command(output_dir, repo, hub.hub_private)
    try:
        url = push_adapter(output_dir, repo, private=hub.hub_private, log=log)
    except UserError as err:
        text = f"{str(err).rstrip('.')}. The adapter is saved in {output_dir}; push it later with `{later}`."
        if hub.push_later_ok:
            log(f"warning: {text}")
            return
        raise UserError(text) from None
    log(f"pushed to {url}")
