"""bayesattn_lite: the helper package of the course "How gradient descent shapes attention".

Every chapter imports it instead of pasting code. One idea per module:

- ``attention``  the single head of the paper and its closed-form gradients (no autograd)
- ``gradcheck``  autograd and finite-difference references to check those formulas against
- ``train``      the one training loop: devices, seeds, parameter groups, history, checkpoints
- ``toy``, ``specialisation``  chapter 4's task with a known posterior, and its training runs
- ``diagnostics`` entropies, change rates, PCA, error in bits, Paper I's geometry
- ``em``          EM for a Gaussian mixture, beside the head (chapter 5)
- ``tasks``       the sticky Markov chain and the wind tunnels, each with its exact posterior
- ``batched``, ``experiments``  many seeds and schedules trained as one computation (chapter 6)
- ``models``      Transformer, Mamba-style SSM, LSTM and MLP behind one interface
- ``comparison``, ``distributed``  training on the wind tunnels; the same under torchrun (DDP)
- ``monitor``     records alpha, u, b and the advantage of a model during training (chapter 9)
- ``checks``, ``assignments``, ``grading``  exercise checks, student versions, the autograder
- ``plots``, ``widgets``, ``sticky_widget``  figures and interactive panels used by the chapters
"""

__version__ = "0.1.0"

# Where the course lives. The notebooks' install cells and _config.yml name the same
# repository and version; tests/test_notebooks.py keeps them in step.
REPOSITORY_URL = "https://github.com/bayesattn-course/bayesattn-lite"
