"""Building blocks of the Point-GNN layers: activations, initialisers, a linear layer and the MLP.

``MLP`` is a stack of fully connected layers ``x -> act(W x + b)``, the activation after each layer or, with
``linear_last``, after all but the last (the original's ``is_logits=True``). No normalisation layers.

Every layer's product is ``pgnn.nn.gemm``'s: the same bytes on any CPU and thread count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pgnn.nn import gemm


def _relu(x: Tensor, inplace: bool) -> Tensor:
    return F.relu(x, inplace=inplace)


def _relu6(x: Tensor, inplace: bool) -> Tensor:
    return F.relu6(x, inplace=inplace)


def _leaky_relu(x: Tensor, inplace: bool) -> Tensor:
    # the original's LeakyReLU is tf.nn.leaky_relu(alpha=0.01)
    return F.leaky_relu(x, negative_slope=0.01, inplace=inplace)


def _elu(x: Tensor, inplace: bool) -> Tensor:
    return F.elu(x, inplace=inplace)


def _sigmoid(x: Tensor, inplace: bool) -> Tensor:
    return x.sigmoid_() if inplace else torch.sigmoid(x)


def _tanh(x: Tensor, inplace: bool) -> Tensor:
    return x.tanh_() if inplace else torch.tanh(x)


# name -> activation(x, inplace). All of these are safe in place under autograd on a freshly computed linear
# output: their backward needs only their own result.
ACTIVATIONS: Mapping[str, Callable[[Tensor, bool], Tensor]] = MappingProxyType(
    {
        "relu": _relu,
        "relu6": _relu6,
        "leaky_relu": _leaky_relu,
        "elu": _elu,
        "sigmoid": _sigmoid,
        "tanh": _tanh,
    }
)


def _init_xavier_uniform(linear: nn.Linear, generator: torch.Generator | None) -> None:
    # slim.fully_connected's default: Glorot/Xavier uniform, U(-a, a) with a = sqrt(6 / (fan_in + fan_out)).
    nn.init.xavier_uniform_(linear.weight, generator=generator)
    nn.init.zeros_(linear.bias)


def _init_kaiming_uniform(linear: nn.Linear, generator: torch.Generator | None) -> None:
    nn.init.kaiming_uniform_(linear.weight, nonlinearity="relu", generator=generator)
    nn.init.zeros_(linear.bias)


def _init_torch_default(linear: nn.Linear, generator: torch.Generator | None) -> None:
    # nn.Linear.reset_parameters: weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    nn.init.kaiming_uniform_(linear.weight, a=math.sqrt(5), generator=generator)
    bound = 1.0 / math.sqrt(linear.in_features) if linear.in_features > 0 else 0.0
    nn.init.uniform_(linear.bias, -bound, bound, generator=generator)


INITIALIZERS: Mapping[str, Callable[[nn.Linear, torch.Generator | None], None]] = MappingProxyType(
    {
        "xavier_uniform": _init_xavier_uniform,
        "kaiming_uniform": _init_kaiming_uniform,
        "torch_default": _init_torch_default,
    }
)


@dataclass(frozen=True)
class LinearInit:
    """How to initialise a new ``nn.Linear``: ``INITIALIZERS[name]``, drawing from ``generator``.

    Modules initialise their layers in construction order, so one generator seeds a whole network.
    """

    name: str = "xavier_uniform"
    generator: torch.Generator | None = None

    def __call__(self, linear: nn.Linear) -> None:
        with torch.no_grad():
            INITIALIZERS[self.name](linear, self.generator)


def linear(x: Tensor, layer: nn.Linear) -> Tensor:
    """``layer(x)``, with the same bytes on any CPU and thread count (:mod:`pgnn.nn.gemm`).

    Shapes:
        x: (E, K) -> (E, M)
    """
    return gemm.linear(x, layer.weight, layer.bias)


class MLP(nn.Module):
    """Fully connected layers ``in_dim -> widths[0] -> ... -> widths[-1]``, the activation after each layer
    except the last when ``linear_last`` (the original's ``is_logits=True``).

    Shapes:
        x: (..., in_dim) -> (..., widths[-1])
    """

    def __init__(
        self,
        in_dim: int,
        widths: Sequence[int],
        activation: str,
        *,
        linear_last: bool,
        init: LinearInit = LinearInit(),  # noqa: B008 (frozen)
    ) -> None:
        super().__init__()
        dims = [in_dim, *widths]
        self.layers = nn.ModuleList(
            nn.utils.skip_init(nn.Linear, d_in, d_out)
            for d_in, d_out in zip(dims[:-1], dims[1:], strict=True)
        )
        for layer in self.layers:
            init(layer)
        self.act = ACTIVATIONS[activation]
        self.linear_last = linear_last
        self.out_dim = dims[-1]

    def forward(self, x: Tensor, *, last_activation: bool = True) -> Tensor:
        """``last_activation=False`` stops before the last layer's activation (when it has one)."""
        if not self.layers:
            return x
        return self.forward_from_first(linear(x, self.layers[0]), last_activation=last_activation)

    def forward_from_first(self, pre: Tensor, *, last_activation: bool = True) -> Tensor:
        """Continue from the first layer's pre-activation ``pre`` (..., widths[0]), which is overwritten."""
        x = pre
        last = len(self.layers) - 1
        for k, layer in enumerate(self.layers):
            if k > 0:
                x = linear(x, layer)
            if k < last or (not self.linear_last and last_activation):
                x = self.act(x, True)  # in place: x is always a fresh linear output here
        return x
