"""The episode core: what one tool-use episode is, how its text is marked, how it is encoded.

`Episode`, `Action` and the `Task` protocol; the text-format markers and `advance` (interpret one
generated segment, run its tool call, return the observation); one `encode` of an episode to
tokens and `loss_mask`, and one `trim_to_longest` of padded batches. Rollouts, learners,
preference data, experts, rewards and replay all use these. Host code.
"""

from rlagents.episodes._core import Action
from rlagents.episodes._core import advance
from rlagents.episodes._core import ANSWER_CLOSE
from rlagents.episodes._core import ANSWER_OPEN
from rlagents.episodes._core import BOS
from rlagents.episodes._core import CALL_CLOSE
from rlagents.episodes._core import CALL_OPEN
from rlagents.episodes._core import end_unanswered
from rlagents.episodes._core import EOS
from rlagents.episodes._core import Episode
from rlagents.episodes._core import OBS_CLOSE
from rlagents.episodes._core import OBS_OPEN
from rlagents.episodes._core import play
from rlagents.episodes._core import observation_text
from rlagents.episodes._core import prompt_text
from rlagents.episodes._core import Task
from rlagents.episodes._encode import completion_pieces
from rlagents.episodes._encode import completion_text
from rlagents.episodes._encode import encode
from rlagents.episodes._encode import encode_pieces
from rlagents.episodes._encode import encode_text
from rlagents.episodes._encode import EncodeError
from rlagents.episodes._encode import episode_pieces
from rlagents.episodes._encode import RolloutBatch
from rlagents.episodes._encode import stack_episodes
from rlagents.episodes._encode import trim_to_longest

MARKERS = (BOS, EOS, CALL_OPEN, CALL_CLOSE, OBS_OPEN, OBS_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)
# Where a policy's segment ends: a call, an answer, or the end of the sequence.
STOP_MARKERS = (CALL_CLOSE, ANSWER_CLOSE, EOS)

__all__ = [
    "ANSWER_CLOSE", "ANSWER_OPEN", "BOS", "CALL_CLOSE", "CALL_OPEN", "EOS", "MARKERS",
    "OBS_CLOSE", "OBS_OPEN", "STOP_MARKERS",
    "Action", "EncodeError", "Episode", "RolloutBatch", "Task",
    "advance", "completion_pieces", "completion_text", "encode", "encode_pieces", "encode_text",
    "end_unanswered", "episode_pieces", "observation_text", "play", "prompt_text", "stack_episodes",
    "trim_to_longest",
]
