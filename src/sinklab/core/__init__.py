"""What every capability may use and that imports none of them: user errors, run directories and
atomic files, worker processes, named hooks, the attention registry, corpora, text and figures."""
