#!/usr/bin/env bash
# Issue 68's grid in its pre-registered order (benchmarks/suites/refer-1m.preregistration.md,
# "Order"). Start it twice, in the background, for two lanes on a 2-core machine:
#
#   nohup benchmarks/refer-1m-order.sh > laneA.log 2>&1 &
#   nohup benchmarks/refer-1m-order.sh > laneB.log 2>&1 &
#
# The two drivers share the grid through the runs' lock files: each takes the next run nobody
# holds, a finished run is skipped and an interrupted one resumes from its checkpoint, so the
# same two commands restart the grid where it stopped. Every step writes its reports into
# benchmarks/results/ (learning_refer-1m[_Ant-v5].*, learning_refer-1m_verdicts.md).
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-.venv/bin/python}
grid() { "$PY" benchmarks/learning.py --suite refer-1m --steps 1000000 "$@"; }
ALL=(--seeds 0 1 2 3 4)
for env in Ant-v5 HalfCheetah-v5; do   # 1. DDPG with ER and with ReF-ER (library defaults)
    grid "${ALL[@]}" --env "$env" --entries ddpg-er ddpg-refer
done
for env in HalfCheetah-v5 Ant-v5; do   # 2. the same with the authors' choices
    grid "${ALL[@]}" --env "$env" --entries ddpg-er-smarties ddpg-refer-smarties
done
for env in HalfCheetah-v5 Ant-v5; do   # 3. V-RACER: ReF-ER, ER, Rule 1 only, Rule 2 only
    grid "${ALL[@]}" --env "$env" --entries vracer vracer-er vracer-refer1 vracer-refer2
done
grid --seeds 0 1 2 --env HalfCheetah-v5 --entries naf-er naf-refer   # 4. NAF (C4: seeds 0-2)
for env in HalfCheetah-v5 Ant-v5; do   # 5. SB3's PPO with App. D's settings (.venv-bench)
    grid "${ALL[@]}" --env "$env" --entries sb3-ppo
done
for env in HalfCheetah-v5 Ant-v5; do   # 6. secondary: the paper's App. A DDPG with ReF-ER
    grid "${ALL[@]}" --env "$env" --entries ddpg-refer-appa
done
echo "refer-1m: every pre-registered step has run"
