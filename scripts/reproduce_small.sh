#!/usr/bin/env bash
# Every method on every task, and the journal paper's studies, at a scale that fits a 2-core
# CPU in under two hours: a small randomly initialised BERT (L4 H312 A12), 1 epoch on at
# most 4000 train pairs (NLI: 8000 at batch 64), validation and test on seeded subsets of at
# most 2000 pairs, Adam 1e-4 (random init needs more than the original's 2e-5). LCQMC and
# PAWSX have no train split here, so they train on a seeded half of valid and validate on
# the other half. Feature models are validated every 10 steps, for the convergence table.
# Then the retrieval study (issues 36, 37): CoSENT, MNRL (in-batch negatives only, and with hard
# negatives from the labels), AnglE and the CoSENT + in-batch + angle mix on ATEC, BQ, LCQMC,
# STS-B and NLI, each with the same 125 steps, tested on Spearman and on retrieval; MNRL on
# negatives mined by the in-batch MNRL run (ATEC, BQ, STS-B), and the CoSENT and MNRL runs'
# rankings reranked by an interaction CoSENT model of the task. Then the calibration study (issue
# 38): the match decision that the paper's CoSENT runs of ATEC, BQ, LCQMC and PAWSX (feature and
# interaction) ship, fitted on valid, measured on their test pairs.
#
#   scripts/reproduce_small.sh [DATA_DIR] [OUT_DIR] [DOCS_DIR]              # all: results.md, retrieval.md, calibration.md
#   scripts/reproduce_small.sh retrieval [DATA_DIR] [OUT_DIR] [DOCS_DIR]    # the retrieval study alone (~30 min)
#   scripts/reproduce_small.sh calibration [DATA_DIR] [OUT_DIR] [DOCS_DIR]  # the calibration study alone
#
# Defaults: DATA_DIR ../shared/data, OUT_DIR runs/small, DOCS_DIR docs/small-random (a data
# folder called "retrieval" is given as ./retrieval). The study's runs are OUT_DIR/retrieval-*,
# its rerankers OUT_DIR/rerank-*, the seeded subsets it mines and evaluates on OUT_DIR/subsets,
# the mined negatives OUT_DIR/mined and the reranked evaluations OUT_DIR/reranked; its report is
# DOCS_DIR/retrieval.md and retrieval.png; results.md is made from the other runs. The calibration
# study's runs are the paper's own (OUT_DIR/cosent-TASK and interact-cosent-TASK, trained alike, so
# whichever study comes first trains them for both); its report is DOCS_DIR/calibration.md and
# calibration.png. A run that
# already has metrics.json, and a step whose output is there, is skipped, so re-running after an
# interruption finishes the rest (an interrupted run itself resumes from its last epoch).
set -euo pipefail
cd "$(dirname "$0")/.."
STUDIES=(paper retrieval calibration)
if [[ ${1:-} == retrieval || ${1:-} == calibration ]]; then STUDIES=("$1"); shift; fi
DATA=${1:-../shared/data}
OUT=${2:-runs/small}
DOCS=${3:-docs/small-random}
PY=${PYTHON:-.venv/bin/python}
TRAIN_PAIRS=4000 EVAL_PAIRS=2000  # each run's seeded subsets (seed 42, the runs' default)
COMMON=(--data-dir "$DATA" --lr 1e-4 --epochs 1 --max-eval-pairs "$EVAL_PAIRS")
FEATURE=(--max-train-pairs "$TRAIN_PAIRS" --eval-every 10)
INTERACTION=(--max-train-pairs "$TRAIN_PAIRS" --eval-every 40)  # an interaction model's validation costs more
CLI=("$PY" -m cosent_tf.cli)  # cosent-tf, run by the same Python
mkdir -p "$OUT"
started=$(date +%s)

step() {  # step NAME OUTPUT COMMAND...: COMMAND unless OUTPUT is there; its log NAME.log, its time NAME.seconds
  local name=$1 output=$2; shift 2
  if [[ -e $output ]]; then echo "skip $name (finished)"; return; fi
  local t0=$(date +%s)
  echo "[$(( (t0 - started) / 60 )) min] $name ..."
  "$@" > "$OUT/$name.log" 2>&1 || { echo "FAILED: $name (see $OUT/$name.log)"; tail -5 "$OUT/$name.log"; exit 1; }
  echo $(( $(date +%s) - t0 )) > "$OUT/$name.seconds.tmp" && mv "$OUT/$name.seconds.tmp" "$OUT/$name.seconds"
  echo "    $(tail -1 "$OUT/$name.log" | cut -c1-160)  ($(cat "$OUT/$name.seconds") s)"
}

run() {  # run NAME SCRIPT TASK [options...]: a training script's run in OUT/NAME
  local name=$1 script=$2 task=$3; shift 3
  local extra=() positional=("$task")
  if [[ $task == LCQMC || $task == PAWSX ]]; then extra=(--train-from-valid 0.5); fi
  if [[ $task == NLI ]]; then positional=(); fi  # the NLI scripts take no task
  step "$name" "$OUT/$name/metrics.json" \
    "$PY" "scripts/$script" "${positional[@]}" "${COMMON[@]}" "${extra[@]}" "$@" --output-dir "$OUT/$name"
}

# The paper's CoSENT runs of a task that the calibration study measures too: one run line each, so
# that the two studies train them alike and share them.
feature_cosent() { run "cosent-$1" cosent.py "$1" "${FEATURE[@]}"; }
interaction_cosent() { run "interact-cosent-$1" interact_cosent.py "$1" "${INTERACTION[@]}"; }

of_retrieval_study() {  # of_retrieval_study NAME: whether OUT/NAME (a run, a step's log or time) is the study's
  case $1 in
    retrieval-* | rerank-* | subset-* | mine-* | evaluate-* | subsets | mined | reranked) return 0 ;;
    *) return 1 ;;
  esac
}

minutes_of() {  # minutes_of FILE...: the total of these runs' own wall times (NAME.seconds), rounded
  local total=0 file
  for file in "$@"; do
    if [[ -f $file ]]; then total=$(( total + $(cat "$file") )); fi
  done
  echo $(( (total + 30) / 60 ))
}

paper() {
  # Trained on NLI (one pass over 8000 seeded pairs), validated and tested on the five tasks.
  for script in cosent_nli sbert_nli; do
    run "$script" "$script.py" NLI --max-train-pairs 8000 --steps-per-epoch 125 --eval-every 25
  done
  # The paper's Table I: a contrastive loss that pushes negatives only down to ε, on ATEC, next
  # to CoSENT, at mean pooling as in the journal paper (at [CLS] nothing learns on ATEC here).
  for epsilon in -1 0 0.9; do
    run "contrastive-eps$epsilon-last-avg-ATEC" cosent.py ATEC --loss contrastive --epsilon "$epsilon" \
      --pooling last-avg "${FEATURE[@]}"
  done
  run "cosent-last-avg-ATEC" cosent.py ATEC --pooling last-avg "${FEATURE[@]}"
  # The paper's pooling comparison (CoSENT's [CLS] runs below are the fourth row).
  for task in STS-B BQ; do
    for pooling in last-avg max first-last-avg; do
      run "cosent-$pooling-$task" cosent.py "$task" --pooling "$pooling" "${FEATURE[@]}"
    done
  done
  # Convergence at mean pooling too (the paper's pooling; at [CLS] valid Spearman peaks at once
  # at this scale): MSE and Sentence-BERT next to CoSENT's last-avg runs above.
  for task in STS-B BQ; do
    run "mse-last-avg-$task" cosent.py "$task" --loss mse --pooling last-avg "${FEATURE[@]}"
    run "sbert-last-avg-$task" sbert.py "$task" --pooling last-avg "${FEATURE[@]}"
  done
  for task in ATEC BQ LCQMC PAWSX STS-B; do
    feature_cosent "$task"
    run "sbert-$task" sbert.py "$task" "${FEATURE[@]}"
    run "mse-$task" cosent.py "$task" --loss mse "${FEATURE[@]}"
  done
  for task in ATEC BQ LCQMC PAWSX; do
    run "interact-ce-$task" interact.py "$task" "${INTERACTION[@]}"
    interaction_cosent "$task"
  done
  # CoSENT at larger global batches over the same epoch (so fewer, larger steps), reached with
  # micro-batches of 32 pairs, at mean pooling (where training helps: at [CLS] fewer steps would
  # look better only because they move the model less); the 32-pair runs are the pooling runs.
  for task in STS-B BQ; do
    for size in 128 512; do
      run "cosent-last-avg-batch$size-$task" cosent.py "$task" --pooling last-avg --batch-size "$size" \
        --micro-batch-size 32 "${FEATURE[@]}"
    done
  done

  # The paper's runs are every run but the retrieval study's; the minutes are the total of their
  # own wall times, so re-running only the report keeps the true figure.
  local runs=() seconds=() dir
  for dir in "$OUT"/*/; do of_retrieval_study "$(basename "$dir")" || runs+=("$dir"); done
  for dir in "$OUT"/*.seconds; do of_retrieval_study "$(basename "$dir")" || seconds+=("$dir"); done
  local minutes
  minutes=$(minutes_of "${seconds[@]}")
  "$PY" scripts/report.py "${runs[@]}" --output-dir "$DOCS" --preface "## Small-scale reproduction (random initialisation, partial data)

**These numbers come from a randomly initialised small BERT (4 layers, hidden 312, 12 heads,
intermediate 1248; no pretrained weights exist on the machines that made them), trained for
one epoch on at most 4000 pairs (NLI: 8000), on partial data, and tested on seeded subsets of
at most 2000 pairs. They are not comparable with the published numbers.** LCQMC and PAWSX
have no train split here: those runs (marked †) train on a seeded half of valid and validate
on the other half. What the tables show is how the losses, the paper's studies and the batch
size compare at this scale, from random initialisation and after one short epoch; a
pretrained model starts where these runs cannot reach, so the published differences need not
appear here.

Made by \`scripts/reproduce_small.sh\` (Adam 1e-4, maxlen 64 / 128 for PAWSX, interaction
128 / 256, batch 32 pairs (NLI 64, interaction CoSENT 64), λ = 20, [CLS] pooling, seed 42)
on a 2-core CPU in ${minutes} minutes of runs. NLI runs train on the dev and test files of
CNSD SNLI and MNLI that are here (the train splits are not), one pass over 8000 seeded pairs.
Feature models are validated every 10 steps for the convergence tables and plots; the best
weights are still chosen at the epoch's end, so one epoch's runs are tested at its end. With
[CLS] pooling valid Spearman is highest at the first validation on several tasks and falls
after (the untrained model's [CLS] vector already carries some character overlap), so
convergence is also compared at mean pooling, where it rises through the epoch. The
Table I runs use the contrastive loss with its threshold ε at mean pooling (the journal
paper's; at [CLS] no loss improves on ATEC here), next to CoSENT at mean pooling; the pooling
runs change only \`--pooling\`; the batch-size runs use mean pooling and change only
\`--batch-size\` (with \`--micro-batch-size 32\`), so a larger batch takes fewer steps at
the same learning rate: 125 steps at 32 pairs, 32 at 128 and 8 at 512."
  echo "paper's runs: ${minutes} minutes; report in $DOCS/results.md"
}


retrieval() {
  # The retrieval study: every objective gets the same 125 steps (the CoSENT runs' one pass over
  # 4000 pairs at 32, NLI 8000 at 64): MNRL trains on the positive pairs alone, so one epoch of
  # it would be fewer steps. Mean pooling for all, no in-epoch validation (cheap).
  local budget=(--pooling last-avg --steps-per-epoch 125) task
  for task in ATEC BQ LCQMC STS-B NLI; do
    local script=cosent.py pairs=(--max-train-pairs "$TRAIN_PAIRS")
    if [[ $task == NLI ]]; then script=cosent_nli.py pairs=(--max-train-pairs 8000); fi
    run "retrieval-cosent-$task" "$script" "$task" "${budget[@]}" "${pairs[@]}"
    run "retrieval-mnrl-$task" "$script" "$task" --loss mnrl --no-hard-negatives-from-labels \
      "${budget[@]}" "${pairs[@]}"
    run "retrieval-mnrl-hard-$task" "$script" "$task" --loss mnrl --hard-negatives-from-labels \
      "${budget[@]}" "${pairs[@]}"
    run "retrieval-angle-$task" "$script" "$task" --loss angle "${budget[@]}" "${pairs[@]}"
    run "retrieval-cosent-ibn-$task" "$script" "$task" --loss cosent-ibn "${budget[@]}" "${pairs[@]}"
  done
  # An interaction CoSENT reranker per task: five epochs of the train pairs (after one, these
  # models from random weights barely rank), the best on valid kept, no in-epoch validation.
  # Its name is not retrieval-*: it is no row of the tables.
  for task in ATEC BQ LCQMC STS-B; do
    run "rerank-interact-cosent-$task" interact_cosent.py "$task" --max-train-pairs "$TRAIN_PAIRS" --epochs 5
  done
  # The pairs the runs saw, as files, so that mine and evaluate see exactly them: a run's seeded
  # train pairs (LCQMC has no train split: its runs train on half of valid) and test pairs.
  local subsets=$OUT/subsets senteval=$DATA/senteval_cn
  [[ -d $senteval ]] || senteval=$DATA  # DATA may be the senteval_cn folder itself
  mkdir -p "$subsets" "$OUT/mined" "$OUT/reranked"
  for task in ATEC BQ STS-B; do
    step "subset-$task-train" "$subsets/$task.train.tsv" "$PY" scripts/subset.py "$task" train \
      --count "$TRAIN_PAIRS" --data-dir "$DATA" --output "$subsets/$task.train.tsv"
  done
  for task in ATEC BQ LCQMC STS-B; do
    step "subset-$task-test" "$subsets/$task.test.tsv" "$PY" scripts/subset.py "$task" test \
      --count "$EVAL_PAIRS" --data-dir "$DATA" --output "$subsets/$task.test.tsv"
  done
  # Negatives mined by the MNRL run of in-batch negatives, guarded by the reranker against false
  # negatives; MNRL trained on them with the study's budget, tested on the task's test file as
  # sampled by every run (so on the same subset; the report checks its queries and corpus).
  for task in ATEC BQ STS-B; do
    step "mine-$task" "$OUT/mined/$task.jsonl" "${CLI[@]}" mine --data "$subsets/$task.train.tsv" \
      --model "$OUT/retrieval-mnrl-$task/model" --rescore "$OUT/rerank-interact-cosent-$task/model" \
      --num-negatives 1 --range 10-50 --output "$OUT/mined/$task.jsonl"
    step "retrieval-mnrl-mined-$task" "$OUT/retrieval-mnrl-mined-$task/metrics.json" "${CLI[@]}" train \
      --train "$OUT/mined/$task.jsonl" --valid "$senteval/$task/$task.valid.data" \
      --test "$senteval/$task/$task.test.data" --name "$task" --loss mnrl "${budget[@]}" --lr 1e-4 --epochs 1 \
      --max-eval-pairs "$EVAL_PAIRS" --output-dir "$OUT/retrieval-mnrl-mined-$task"
  done
  # Retrieve, then rerank: each query's top 20 of a first stage reordered by the task's reranker.
  local first
  for task in ATEC BQ LCQMC STS-B; do
    for first in retrieval-cosent retrieval-mnrl-hard; do
      step "evaluate-$first-$task" "$OUT/reranked/$first-$task.json" "${CLI[@]}" evaluate \
        "$OUT/$first-$task/model" "$subsets/$task.test.tsv" --retrieval \
        --rerank "$OUT/rerank-interact-cosent-$task/model" --rerank-top 20 --output "$OUT/reranked/$first-$task.json"
    done
  done
  local minutes
  minutes=$(minutes_of "$OUT"/retrieval-*.seconds "$OUT"/rerank-*.seconds "$OUT"/subset-*.seconds \
    "$OUT"/mine-*.seconds "$OUT"/evaluate-*.seconds)
  "$PY" scripts/report.py "$OUT"/retrieval-*/ --evaluations "$OUT"/reranked/*.json --output-dir "$DOCS" \
    --preface "## Retrieval study (random initialisation, partial data)

**The same randomly initialised small BERT, partial data and seeded test subsets of at most
2000 pairs as [the small reproduction](results.md): not comparable with published numbers.**
Each loss is trained on ATEC, BQ, LCQMC† and STS-B and tested on that task, and trained on NLI
and tested on all five: CoSENT; MNRL, in-batch negatives over the positive pairs alone (each
anchor picks its positive among every positive of the batch); MNRL with hard negatives from
the labels (\`--hard-negatives-from-labels\`: the texts an anchor's pairs label as no match,
on NLI its contradictions as in supervised SimCSE; an anchor without one gets a random text);
AnglE; and the mix of CoSENT, in-batch negatives and angle (\`--loss cosent-ibn\`) at AnglE's
weights (cosine 0, in-batch 20, angle 1).

Two more kinds of rows (issue 37). **MNRL (mined negatives)**, on ATEC, BQ and STS-B:
\`cosent-tf mine\` takes the 4000 seeded train pairs the other runs train on and, for each
anchor, ranks every distinct second text of them with the MNRL run of in-batch negatives,
then draws one negative from ranks 10 to 50 (\`--range 10-50 --num-negatives 1\`), never a
text a labelled pair marks as the anchor's positive nor a duplicate of its positive, and none
that the task's reranker (below, \`--rescore\`) scores within its default margin of the
positive (a likely false negative); MNRL then trains on those (anchor, positive, negative)
triples for the same 125 steps, valid and test sampled as every run samples them, so it is
tested on the same subset (the report checks its retrieval's queries and corpus against the
other runs'). LCQMC has no train split here (its runs train on half of valid), so it has no
mined run. **→ reranked by interaction CoSENT (top 20)**: an interaction CoSENT model per task
(\`rerank-interact-cosent-TASK\`), trained five epochs on at most 4000 pairs (LCQMC: half of
valid), the best epoch on valid kept, reorders each query's top 20 of the CoSENT run and of the
MNRL run with hard negatives from labels (\`cosent-tf evaluate --retrieval --rerank\`), on
the test subset those runs were tested on, written to a file; the report checks that each
evaluation's first-stage metrics are the run's own. The reranker is as small, randomly
initialised and briefly trained as every model here: its rows say what such a model does when
it reranks, not what a pretrained cross-encoder would.

Made by \`scripts/reproduce_small.sh\` (its study alone: \`scripts/reproduce_small.sh retrieval\`) on a
2-core CPU in ${minutes} minutes (runs, rerankers, mining and evaluations): every run takes the
same 125 steps (\`--steps-per-epoch 125\`) of 32 pairs or examples (NLI 64), from at most 4000 train pairs
(NLI 8000), at mean pooling (\`last-avg\`, where training
helps at this scale; see results.md), Adam 1e-4, λ (\`--scale\`) 20, seed 42, and is tested at
the end. Same steps, not the same epochs: MNRL trains on the positive pairs only, about a
quarter of ATEC's pairs, half of BQ's, LCQMC's and STS-B's and a third of NLI's, so its 125
steps go over its examples two to four times where CoSENT goes over its pairs once; an MNRL
example with a hard negative holds three texts, not two. The in-batch losses keep examples
that share a text out of one batch (where it would be a false negative). Retrieval is what
\`cosent-tf evaluate --retrieval\` computes on the test subset: for each distinct first text
with a positive pair (STS-B: a score above 2.5), every distinct second text ranked by exact
cosine; Recall@1 and @10, MRR@10, nDCG@10. Which loss led on each metric, how mined negatives
compare with MNRL's other negatives and what reranking changed are computed from the tables and
said under them."
  echo "retrieval study's runs: ${minutes} minutes; report in $DOCS/retrieval.md"
}

calibration() {
  # The calibration study: the paper's CoSENT runs of each binary task, a feature model at [CLS]
  # and an interaction model, each with the decision training fitted on its valid pairs.
  local task runs=() seconds=() missing=() dir
  for task in ATEC BQ LCQMC PAWSX; do
    feature_cosent "$task"
    interaction_cosent "$task"
    runs+=("$OUT/cosent-$task" "$OUT/interact-cosent-$task")
    seconds+=("$OUT/cosent-$task.seconds" "$OUT/interact-cosent-$task.seconds")
  done
  # A run finished before models shipped a decision is skipped as finished, but has nothing to measure.
  for dir in "${runs[@]}"; do [[ -f $dir/model/decision.json ]] || missing+=("$dir"); done
  if (( ${#missing[@]} )); then
    echo "FAILED: calibration: trained before models shipped a decision (no model/decision.json): ${missing[*]};"
    echo "    move these runs away (or train them again with --overwrite) and run again"
    exit 1
  fi
  local minutes
  minutes=$(minutes_of "${seconds[@]}")
  "$PY" scripts/report.py --calibration "${runs[@]}" --output-dir "$DOCS" --preface "## Calibration study (random initialisation, partial data)

**The same randomly initialised small BERT, partial data and seeded test subsets of at most
2000 pairs as [the small reproduction](results.md): not comparable with published numbers.**
For ATEC, BQ, LCQMC† and PAWSX†: the paper's runs of a feature model trained with CoSENT at
[CLS] pooling (\`cosent-TASK\`, as results.md's rows of that name) and of an interaction model trained with
CoSENT (\`interact-cosent-TASK\`), trained as the small reproduction trains them. At the end of
each run, training fits the match decision the model ships (\`model/decision.json\`) on the
valid pairs the run was validated on (a seeded subset of at most 2000; LCQMC and PAWSX: of the
half of valid not trained on): the thresholds best for accuracy and for F1, and a calibration
map from the score to the probability of a match, isotonic regression or Platt scaling,
whichever had the lower log-loss on five held-out folds of those pairs. Here each decision
meets its run's test pairs: each shipped threshold against the best threshold of the test
pairs themselves (an oracle no deployed model has), and the ECE of the score read as a
probability (a cosine clipped to [0, 1], the way \"0.72 is 72% alike\" reads it) against that of
the calibrated probability. The figures are computed from each run's test scores and its
decision.json, and checked against its metrics.json; what they show is said under the table,
whatever it is. Valid and test pairs come from the same task here: on another domain's data
a decision is refitted without retraining (\`cosent-tf calibrate MODEL_DIR FILE\`).

Made by \`scripts/reproduce_small.sh\` (its study alone: \`scripts/reproduce_small.sh calibration\`)
on a 2-core CPU in ${minutes} minutes of runs, with the small reproduction's options (Adam 1e-4,
one epoch of at most 4000 train pairs, batch 32 (interaction CoSENT 64), seed 42)."
  echo "calibration study's runs: ${minutes} minutes; report in $DOCS/calibration.md"
}

for study in "${STUDIES[@]}"; do
  "$study"
done
