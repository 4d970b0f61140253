"""The Platform domain (Masson, Ranchod & Konidaris 2016), headless: ``offpolicy/Platform-v0``.

Sources. The paper (Masson, Ranchod & Konidaris, "Reinforcement Learning with Parameterized
Actions", AAAI 2016, arXiv:1509.01644) describes the domain in words: the agent runs and
jumps across platforms to a goal, avoiding enemies and the gaps between platforms, with three
parameterised actions run(dx), hop(dx), leap(dx); a dense reward, the distance travelled to
the right over the level's length, so that reaching the goal returns 1; the episode ends at the
goal, on touching an enemy or on falling into a gap. The numbers come from the authors'
simulator (github.com/WarwickMasson/aaai-platformer, ``simulator.py`` at its last commit) and
from its Gym port by C. Bester (github.com/cycraig/gym-platform,
``gym_platform/envs/platform_env.py``, ``Platform-v0``), the version the P-DQN / MP-DQN results
(Bester, James & Konidaris 2019) are reported on. This module follows that reference; it was
written from reading it (no code copied), NumPy only, without pygame or rendering.

Level (x to the right, y up; every platform's top is at y = 40)::

    platform 1: x in [0, 250]     gap 1: 225    platform 2: x in [475, 750]    gap 2: 235
    platform 3: x in [985, 1035]  -> the goal is x >= 1035 = the level's length W

The player and the enemies are 20 x 30 boxes (x = their left edge, y = their bottom). The player
starts at (0, 40) at rest; enemy i starts at the right end of platform i (x = right - 20) moving
left at 30/s, and patrols its platform. A step is one parameterised action, simulated in frames
of DT = 0.05 s. In each frame:

1. If the player stands on a platform (y == 40 and its box overlaps the platform in x) the
   action pushes it; otherwise gravity does (dvy = -9.8 DT). Pushes change the velocity by at
   most 30 in x and 200 in y per frame:

   * run(p), p in [0, 30]: dvx = p, every frame of the run;
   * hop(p), p in [0, 720]: one push on the first frame, dvy = 35 - |n_y|,
     dvx = p / (2 * 35 / 9.8 + 1) - vx - |n_x|, n ~ N(0, 1) (the jump's aim at distance p);
   * leap(p), p in [0, 430]: the same with dvy = 25 (a lower, longer jump).

   Every push, gravity included, then slows the player: vx -= |N(0, 0.5 DT)|, vx is clipped
   to [0, 100], vy to [-200, 200]; standing, vx is clipped to [0, 70].
2. The player moves (x += vx DT, y += vy DT, x clipped to [0, W], then vx *= 0.99), and so
   does the enemy of the player's section (enemy 2 once the player is right of platform 2's
   left edge, else enemy 1): it turns round at its platform's ends,
   dx += N(0, 0.5 DT) clipped to [-30, 30], x += dx DT clipped to its platform.
3. A player overlapping a platform is pushed out along the axis of the smaller overlap (onto
   its top: a landing; or out of its side) and stops (vx = 0).
4. The episode terminates when the player is below the platforms' tops (y < 40: it fell into a
   gap), overlaps an enemy, or reaches x >= W (the goal).

A run lasts 20 frames (1 s); a hop or leap lasts until the player stands again (about 144 and
104 frames). Both stop early on termination. The reward of a step is (x_after - x_before) / W,
so an episode's return is x_final / W, in [0, 1], and 1 exactly when the goal is reached.
Episodes are truncated after 200 steps (``max_episode_steps``, as the reference registers it).

Spaces.

* Action: ``Tuple(Discrete(3), Box([0, 0, 0], [30, 720, 430], float32))``: the action index
  (0 run, 1 hop, 2 leap) and one parameter per action; only the chosen action's entry is used
  (clipped to its range), the other two are ignored. The reference's parameters are a nested
  ``Tuple(Box(1,), Box(1,), Box(1,))``, read the same way; one ``Box(3)`` holds the same
  numbers, and is what the library's ``ActionSpec`` takes as a hybrid kind (a discrete(3) and a
  continuous(3) component; nested tuples are refused). MP-DQN's own wrapper removes the nesting
  too, to ``Tuple(Discrete(3), Box(1,), Box(1,), Box(1,))``.
* Observation: ``Box(0, 1, (10,), float32)``, the reference's 9 scaled features and its step
  counter: (0) (x + 20) / (W + 20), (1) vx / 100, (2) the active enemy's x / W, (3) its
  (dx + 30) / 60, (4) the width of the player's current platform / 275, (5) the next
  platform's width / 275, (6) the gap to it / 235, (7) the current platform's left x / W,
  (8) the height of the next platform over the current one (always 0: every platform is at
  the same height), (9) the number of frames the last step took / 200 (0 after reset).
  Platform features switch to the next section once x passes the end of the gap before it.

Where the paper, the original simulator and the reference differ, this module follows the
reference:

* Observation: the original simulator's state is 4 variables (x, vx, enemy x, enemy dx); it
  used the 5 platform features for the parameter policy only. The reference observes all 9,
  scaled, plus the frame count of the last step as a separate ``Discrete(200)``; here that
  count is a 10th feature, count / 200 (a jump takes at most about 144 frames). P-DQN and
  MP-DQN feed their networks the 9 features only: ``obs[:9]`` is exactly their input.
* Parameter ranges: neither the paper nor the original code bounds the parameters (the
  original takes |p| for run); the reference's ranges, "set from empirical testing", and its
  clipping are used. A jump cannot change vx by more than 30, so from rest hop parameters
  above about 244 (30 * (2 * 35 / 9.8 + 1)) and leap parameters above about 183 make the same
  jump; the upper bounds matter from a running start.
* Time limit: none in the paper; 200 steps in the reference, a truncation here (Gymnasium),
  where the reference's old Gym API reported it as ``done``.
* Layout: the original code's constants changed over its history; its last commit and the
  reference agree on the widths (250, 275, 50) and gaps (225, 235) used here.
* A run is 20 frames: the reference counts a float 1.0 down by 0.05 while positive, which also
  makes 20 frames.
* Reset: the start is deterministic in both; randomness (enemy speed, the player's slowing,
  the jumps' error) comes from the env's ``np_random`` (``reset(seed=...)`` reproduces an
  episode). ``noise=False`` removes it, for hand-checked trajectories (not a benchmark
  setting).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

ENV_ID = "offpolicy/Platform-v0"
MAX_EPISODE_STEPS = 200

RUN, HOP, LEAP = 0, 1, 2
PARAM_LOW = np.zeros(3, np.float32)
PARAM_HIGH = np.array([30.0, 720.0, 430.0], np.float32)

# level: (left x, width) of each platform; tops at PLATFORM_TOP
PLATFORMS = ((0.0, 250.0), (475.0, 275.0), (985.0, 50.0))
GAPS = (225.0, 235.0)
PLATFORM_TOP = 40.0
LEVEL_LENGTH = 1035.0  # the right end of platform 3: the goal
BODY_WIDTH, BODY_HEIGHT = 20.0, 30.0  # player and enemies

DT = 0.05  # seconds per frame
RUN_FRAMES = 20  # a run lasts 1 s
GRAVITY = 9.8
MAX_SPEED_X, MAX_SPEED_Y = 100.0, 200.0
MAX_SPEED_STANDING = 70.0
MAX_PUSH_X = MAX_SPEED_X - MAX_SPEED_STANDING  # per frame (the reference's max ddx * DT)
MAX_PUSH_Y = MAX_SPEED_Y
SPEED_DECAY = 0.99  # per frame
HOP_LIFT, LEAP_LIFT = 35.0, 25.0
JUMP_NOISE = 1.0
SLOWING_NOISE = 0.5 * DT  # the player's per-push slowing and the enemies' speed noise
ENEMY_SPEED = 30.0

MAX_FRAMES_FEATURE = 200.0  # the reference's Discrete(200) frame counter
NUM_FEATURES = 10


class PlatformEnv(gym.Env):
    """Platform: run, hop and leap across three platforms past two enemies (module docstring).

    ``noise=False`` makes the dynamics deterministic (for tests and debugging only).
    """

    metadata = {"render_modes": []}

    def __init__(self, noise: bool = True):
        self.noise = bool(noise)
        self.action_space = gym.spaces.Tuple((
            gym.spaces.Discrete(3),
            gym.spaces.Box(PARAM_LOW, PARAM_HIGH, dtype=np.float32),
        ))
        self.observation_space = gym.spaces.Box(0.0, 1.0, (NUM_FEATURES,), np.float32)
        self._start()

    # ------------------------------------------------------------------ Gymnasium API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._start()
        return self._observation(), {}

    def step(self, action):
        index = int(action[0])
        if index not in (RUN, HOP, LEAP):
            raise ValueError(f"Platform action index must be 0 (run), 1 (hop) or 2 (leap), "
                             f"got {index}")
        params = np.asarray(action[1], dtype=np.float64).reshape(3)
        param = float(np.clip(params[index], PARAM_LOW[index], PARAM_HIGH[index]))
        x_before = self.x
        frames, terminated = 0, False
        while True:
            terminated = self._frame(index, param)
            frames += 1
            if terminated:
                break
            if index == RUN and frames == RUN_FRAMES:
                break
            if index != RUN and self._standing():
                break
        self.frames = frames
        reward = (self.x - x_before) / LEVEL_LENGTH
        return self._observation(), float(reward), terminated, False, {}

    # ------------------------------------------------------------------ simulation
    def _start(self) -> None:
        self.x, self.y = 0.0, PLATFORM_TOP
        self.vx, self.vy = 0.0, 0.0
        self.enemy_x = [left + width - BODY_WIDTH for left, width in PLATFORMS[:2]]
        self.enemy_dx = [-ENEMY_SPEED, -ENEMY_SPEED]
        self.frames = 0

    def _above(self, platform: tuple[float, float]) -> bool:
        left, width = platform
        return left - BODY_WIDTH <= self.x <= left + width

    def _standing(self) -> bool:
        # landing sets y to the top exactly, so the equality is exact
        return self.y == PLATFORM_TOP and any(self._above(p) for p in PLATFORMS)

    def _enemy_index(self) -> int:
        return 1 if self.x > PLATFORMS[1][0] else 0

    def _push(self, dvx: float, dvy: float) -> None:
        """Change the player's velocity by at most the per-frame limits, then slow it."""
        self.vx += min(max(dvx, -MAX_PUSH_X), MAX_PUSH_X)
        self.vy += min(max(dvy, -MAX_PUSH_Y), MAX_PUSH_Y)
        if self.noise:
            self.vx -= abs(float(self.np_random.normal(0.0, SLOWING_NOISE)))
        self.vx = min(max(self.vx, 0.0), MAX_SPEED_X)
        self.vy = min(max(self.vy, -MAX_SPEED_Y), MAX_SPEED_Y)

    def _jump(self, distance: float, lift: float) -> None:
        # the reference aims the jump with this flight-time estimate (in its own units)
        flight = 2.0 * lift / GRAVITY + 1.0
        error_x, error_y = (np.abs(self.np_random.normal(0.0, JUMP_NOISE, 2)).tolist()
                            if self.noise else (0.0, 0.0))
        self._push(distance / flight - self.vx - error_x, lift - error_y)

    def _frame(self, index: int, param: float) -> bool:
        """One DT frame; returns whether the episode terminated in it. A jump pushes on its
        first frame only: the step ends as soon as the player stands again."""
        standing = self._standing()
        if not standing:
            self._push(0.0, -GRAVITY * DT)
        elif index == RUN:
            self._push(param, 0.0)
        else:
            self._jump(param, HOP_LIFT if index == HOP else LEAP_LIFT)
        if standing:
            self.vx = min(self.vx, MAX_SPEED_STANDING)

        enemy = self._enemy_index()  # chosen before anyone moves, as in the reference
        self.x = min(max(self.x + self.vx * DT, 0.0), LEVEL_LENGTH)
        self.y += self.vy * DT
        self.vx *= SPEED_DECAY
        self._move_enemy(enemy)

        for left, width in PLATFORMS:
            if self._overlaps(left, 0.0, width, PLATFORM_TOP):
                self._push_out(left, width)
                self.vx = 0.0

        fell = self.y < PLATFORM_TOP
        hit = any(self._overlaps(ex, PLATFORM_TOP, BODY_WIDTH, BODY_HEIGHT)
                  for ex in self.enemy_x)
        return fell or hit or self.x >= LEVEL_LENGTH

    def _move_enemy(self, i: int) -> None:
        left, width = PLATFORMS[i]
        right = left + width - BODY_WIDTH
        dx = self.enemy_dx[i]
        if not left < self.enemy_x[i] < right:
            dx = -dx
        if self.noise:
            dx += float(self.np_random.normal(0.0, SLOWING_NOISE))
        dx = min(max(dx, -ENEMY_SPEED), ENEMY_SPEED)
        self.enemy_dx[i] = dx
        self.enemy_x[i] = min(max(self.enemy_x[i] + dx * DT, left), right)

    def _overlaps(self, left: float, bottom: float, width: float, height: float) -> bool:
        """Whether the player's box overlaps the box (left, bottom, width, height) (open)."""
        return (left - BODY_WIDTH < self.x < left + width
                and bottom - BODY_HEIGHT < self.y < bottom + height)

    def _push_out(self, left: float, width: float) -> None:
        """Move the player out of a platform it overlaps, along the axis of the smaller move:
        onto its top (a landing, vy = 0) or out of its side (vx = 0)."""
        new_x = self.x
        if self.x < left:
            new_x = left - BODY_WIDTH
        elif self.x > left + width - BODY_WIDTH:
            new_x = left + width
        new_y = self.y
        if self.y < 0.0:
            new_y = -BODY_HEIGHT
        elif self.y > PLATFORM_TOP - BODY_HEIGHT:
            new_y = PLATFORM_TOP
        if new_x != self.x and (new_y == self.y
                                or abs(self.x - new_x) < abs(self.y - new_y)):
            self.x, self.vx = new_x, 0.0
        else:
            self.y, self.vy = new_y, 0.0

    # ------------------------------------------------------------------ observation
    def _platform_features(self) -> tuple[float, float, float, float, float]:
        """(current width, next width, gap, current left x, next height - current height)."""
        (w1, w2, w3), (g1, g2) = (p[1] for p in PLATFORMS), GAPS
        if self.x < w1 + g1:
            return w1, w2, g1, PLATFORMS[0][0], 0.0
        if self.x < w1 + g1 + w2 + g2:
            return w2, w3, g2, PLATFORMS[1][0], 0.0
        return w3, 0.0, 0.0, PLATFORMS[2][0], 0.0

    def _observation(self) -> np.ndarray:
        e = self._enemy_index()
        width, next_width, gap, left, rise = self._platform_features()
        widest = max(p[1] for p in PLATFORMS)
        features = (
            (self.x + BODY_WIDTH) / (LEVEL_LENGTH + BODY_WIDTH),
            self.vx / MAX_SPEED_X,
            self.enemy_x[e] / LEVEL_LENGTH,
            (self.enemy_dx[e] + ENEMY_SPEED) / (2.0 * ENEMY_SPEED),
            width / widest,
            next_width / widest,
            gap / max(GAPS),
            left / LEVEL_LENGTH,
            rise,  # the reference divides by max(1, heights) = 1
            min(self.frames / MAX_FRAMES_FEATURE, 1.0),
        )
        return np.asarray(features, np.float32)


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=f"{__name__}:PlatformEnv",
                 max_episode_steps=MAX_EPISODE_STEPS)
