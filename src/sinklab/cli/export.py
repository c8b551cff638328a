"""``sinklab export``: a pretraining run as a Hugging Face Llama model folder, which every command that
takes a model folder (scan, stream, compress, adapt, bench) then loads like a downloaded model."""

from __future__ import annotations

import argparse

from ..pretrain import export_llama, exported_from

#: The folder appears only once complete (it is built beside its target and renamed into place).
NOTHING_WRITTEN = "nothing was written (the folder appears only once complete); run the command again"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a pretraining run's model as a Hugging Face LlamaForCausalLM folder (safetensors and a byte tokenizer)",
        description=(
            "Export the last checkpoint of a `sinklab pretrain` run as a transformers LlamaForCausalLM folder: "
            "config.json (with a sinklab entry naming the run and step), model.safetensors and a fast tokenizer whose ids "
            "are UTF-8 bytes. The logits equal the native model's (the export checks them before writing). Runs Llama "
            "cannot express exactly are refused: the default tokenizer (pretrain with --tokenizer bytes), attention other "
            "than softmax, per-head extras, sink tokens, learned or no positions, and the Bigram-Backcopy corpus."
        ),
    )
    p.add_argument("run", metavar="RUN_DIR", help="the run directory of `sinklab pretrain --tokenizer bytes`")
    p.add_argument("folder", metavar="FOLDER", help="the model folder to write (it must not exist, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace FOLDER if it holds an earlier sinklab export")
    p.set_defaults(handler=export_command, on_interrupt=NOTHING_WRITTEN)


def export_command(args: argparse.Namespace) -> int:
    folder = export_llama(args.run, args.folder, overwrite=args.overwrite)
    step = exported_from(folder)["step"]
    print(f"exported: {folder} (LlamaForCausalLM, step {step} of {args.run}); load it as a model folder: sinklab scan {folder}")
    return 0
