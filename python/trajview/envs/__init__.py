"""Layer 2, envs: one adapter per env kind behind one small interface (`EnvAdapter`), and the example envs.

`make_adapter` wraps whatever an ``env_creator`` returns; a `RolloutWorker`
steps only the adapter interface (`VectorEnvAdapter` for single-agent envs,
`MultiAgentEnvAdapter` for multi-agent ones), so a new kind of env is one new
file here. Importing this package registers trajview's example envs as
gymnasium ids (`StatelessCartPole`, `RepeatPreviousEnv`).
"""

from .base import EnvAdapter, MultiAgentEnvAdapter, MultiAgentStep, VectorEnvAdapter, VectorStep
from .gym_list import GymEnvList
from .gym_vector import GymVectorEnv
from .make import make_adapter
from .multi_agent_dict import MultiAgentDictEnv, MultiAgentEnv, is_multi_agent_dict_env
from .pettingzoo_aec import PettingZooAECEnv, is_aec_env
from .pettingzoo_parallel import PettingZooParallelEnv, is_parallel_env
from .stateless_cartpole import REPEAT_PREVIOUS_ID, STATELESS_CARTPOLE_ID, RepeatPreviousEnv, StatelessCartPole, make_env

__all__ = [
    # the adapter seam
    "EnvAdapter",
    "GymEnvList",
    "GymVectorEnv",
    "MultiAgentDictEnv",
    "MultiAgentEnv",
    "MultiAgentEnvAdapter",
    "PettingZooAECEnv",
    "MultiAgentStep",
    "PettingZooParallelEnv",
    "VectorEnvAdapter",
    "VectorStep",
    "is_aec_env",
    "is_multi_agent_dict_env",
    "is_parallel_env",
    "make_adapter",
    # example envs
    "REPEAT_PREVIOUS_ID",
    "STATELESS_CARTPOLE_ID",
    "RepeatPreviousEnv",
    "StatelessCartPole",
    "make_env",
]
