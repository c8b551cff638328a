import sinklab

tasks = ("sink_rate", "first_token_mass")  # some tasks of the suite; leave tasks out for all of sinks-v1
board = sinklab.bench_models("HuggingFaceTB/SmolLM2-135M", tasks=tasks, limit="quick", out="runs/bench")
print(board.frame())  # the leaderboard: one row per model, each task's headline metric, wall time
board.frame("metrics")  # one row per (model, task, metric): value, spread, n, over, better
print(sinklab.compare_bench(["runs/bench"]).frame("leaderboard"))  # runs made elsewhere join the same board
