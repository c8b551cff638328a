from sinklab.core.attention import AttentionSpec
from sinklab.pretrain import PretrainConfig, train_lm

# Softpick with TWEO's loss, softmax-1 with OrthoAdam (Kaul et al.'s pair), and Bu et al.'s value-state
# gate, on Bigram-Backcopy: a few small steps here; drop the size settings for the calibrated budget (1,200 steps)
small = dict(steps=6, eval_every=3, checkpoint_every=6, d_model=32, n_heads=2, batch=4, seq_len=32)
pairs = (
    (AttentionSpec("softpick"), {"tweo": 0.01}),
    (AttentionSpec("softmax1"), {"optimizer": "orthoadam"}),
    (AttentionSpec(vga=True), {}),
)
for attention, training in pairs:
    cfg = PretrainConfig(corpus="bb", attention=attention, **training, **small)
    run = train_lm(cfg, f"runs/{cfg.variant}")  # softpick+tweo, softmax1+orthoadam, softmax+vga
    print(cfg.variant, round(run.summary["final_val_loss"], 3), round(run.summary["sink_head_bos_mass_nontrigger"], 3))
