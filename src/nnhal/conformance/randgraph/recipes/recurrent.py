"""Recipes of the recurrent operations: RNN, SVDF, the sequence RNNs, LSTM
(CIFG or not, peephole, projection with or without its bias, layer
normalization), the sequence LSTMs, QUANTIZED_16BIT_LSTM.  Weights are
small (|w| <= 0.5) so states stay in range over the sequence."""

from __future__ import annotations

import numpy as np

from nnhal.conformance.randgraph.recipes.common import OT, Build, T, recipe, scalar_type

ACT = (0, 1, 2, 3, 4, 6)  # NOTE: NONE, RELU, RELU1, RELU6, TANH, SIGMOID: what TFLite's recurrent kernels apply
ACT_NAMES = {0: "NONE", 1: "RELU", 2: "RELU1", 3: "RELU6", 4: "TANH", 6: "SIGMOID"}


def _weight(b: Build, t: T, dims: tuple) -> int:
    rng = np.random.default_rng(b.d.seed())
    v = rng.uniform(-0.5, 0.5, dims) if b.d.flag(0.8) else np.round(rng.uniform(-2, 2, dims)) / 4
    return b.tensor(t, dims, value=v.astype(np.float16 if t == T.TENSOR_FLOAT16 else np.float32), role="weight",
                    connect=False)


def _state(b: Build, t: T, dims: tuple) -> int:
    return b.tensor(t, dims, domain="unit", role="data", connect=False)


def _act(b: Build, options: tuple = (0, 1, 2, 3)) -> int:
    v = b.d.pick(options)
    b.param("act", T.INT32, v, ACT_NAMES[v])
    return v


def _rnn_cell(b: Build, t: T, batch: int, n_in: int, units: int) -> None:
    """An RNN cell's operands after its input: input and recurrent weights, bias, the state, the activation."""
    _weight(b, t, (units, n_in))
    _weight(b, t, (units, units))
    _weight(b, t, (units,))
    _state(b, t, (batch, units))
    _act(b)


@recipe(OT.RNN, "recurrent")
def rnn(b: Build) -> None:
    x = b.main(ranks=(2,), fits=lambda d: d[1] <= 16, domain="unit")
    t = b.operand(x).type
    batch, n_in = b.operand(x).dims
    _rnn_cell(b, t, batch, n_in, b.d.integer(1, 6))
    b.out(t, None)
    b.out(t, None)


@recipe(OT.SVDF, "recurrent")
def svdf(b: Build) -> None:
    x = b.main(ranks=(2,), fits=lambda d: d[1] <= 16, domain="unit")
    t = b.operand(x).type
    batch, n_in = b.operand(x).dims
    units, rank, memory = b.d.integer(1, 4), b.d.integer(1, 2), b.d.integer(1, 4)
    filters = units * rank
    _weight(b, t, (filters, n_in))
    _weight(b, t, (filters, memory))
    if b.d.flag(0.25):
        b.omit("bias")
    else:
        _weight(b, t, (units,))
    _state(b, t, (batch, memory * filters))
    b.param("rank", T.INT32, rank)
    _act(b)
    b.out(t, None)
    b.out(t, None)


def _sequence(b: Build, time_major: bool) -> tuple[int, T, int, int, int]:
    """Input 0 of a sequence operation: (operand, type, time steps, batch, input size)."""
    x = b.main(ranks=(3,), fits=lambda d: d[2] <= 16 and d[0] * d[1] <= 16, domain="unit")
    o = b.operand(x)
    steps, batch = (o.dims[0], o.dims[1]) if time_major else (o.dims[1], o.dims[0])
    return x, o.type, steps, batch, o.dims[2]


@recipe(OT.UNIDIRECTIONAL_SEQUENCE_RNN, "recurrent")
def unidirectional_sequence_rnn(b: Build) -> None:
    time_major = b.d.flag(0.5)
    _, t, _, batch, n_in = _sequence(b, time_major)
    _rnn_cell(b, t, batch, n_in, b.d.integer(1, 5))
    b.param("time_major", T.INT32, int(time_major))
    for _ in b.sig.outputs:
        b.out(t, None)


@recipe(OT.BIDIRECTIONAL_SEQUENCE_RNN, "recurrent")
def bidirectional_sequence_rnn(b: Build) -> None:
    time_major = b.d.flag(0.5)
    _, t, _, batch, n_in = _sequence(b, time_major)
    for _ in range(2):
        units = b.d.integer(1, 4)
        _weight(b, t, (units, n_in))
        _weight(b, t, (units, units))
        _weight(b, t, (units,))
        _state(b, t, (batch, units))
    for name in ("aux_input", "fw_aux_weights", "bw_aux_weights"):
        b.omit(name)
    _act(b)
    b.param("time_major", T.BOOL, time_major)
    merge = len(b.sig.outputs) in (1, 3)
    b.param("merge_outputs", T.BOOL, merge)
    for _ in b.sig.outputs:
        b.out(t, None)


# --------------------------------------------------------------------------
# LSTM


def _lstm_variant(b: Build) -> dict[str, bool]:
    v = {"cifg": b.d.flag(0.3), "peephole": b.d.flag(0.3), "projection": b.d.flag(0.3)}
    v["projection_bias"] = v["projection"] and b.d.flag(0.5)
    b.params.update({k: v[k] for k in ("cifg", "peephole", "projection")})
    return v


def _lstm_weights(b: Build, t: T, v: dict, n_in: int, units: int, out: int) -> None:
    """LSTM's inputs 1-17: input and recurrent weights, peephole, gate biases, projection."""
    for gate in range(4):
        if gate == 0 and v["cifg"]:
            b.omit()
        else:
            _weight(b, t, (units, n_in))
    for gate in range(4):
        if gate == 0 and v["cifg"]:
            b.omit()
        else:
            _weight(b, t, (units, out))
    for gate in (0, 1, 2):  # NOTE: cell-to-input, -forget, -output
        if not v["peephole"] or (gate == 0 and v["cifg"]):
            b.omit()
        else:
            _weight(b, t, (units,))
    for gate in range(4):
        if gate == 0 and v["cifg"]:
            b.omit()
        else:
            _weight(b, t, (units,))
    if v["projection"]:
        _weight(b, t, (out, units))
    else:
        b.omit()
    if v["projection_bias"]:
        _weight(b, t, (out,))
    else:
        b.omit()


def _clips(b: Build, t: T) -> None:
    st = scalar_type(t)
    b.param("cell_clip", st, b.d.pick((0.0, 3.0, 0.5)))
    b.param("projection_clip", st, b.d.pick((0.0, 2.0)) if b.params.get("projection") else 0.0)


def _layer_norm(b: Build, t: T, v: dict, units: int, given: bool) -> None:
    for gate in range(4):
        if not given or (gate == 0 and v["cifg"]):
            b.omit()
        else:
            _weight(b, t, (units,))


@recipe(OT.LSTM, "recurrent")
def lstm(b: Build) -> None:
    x = b.main(ranks=(2,), fits=lambda d: d[1] <= 16, domain="unit")
    t = b.operand(x).type
    batch, n_in = b.operand(x).dims
    v = _lstm_variant(b)
    units = b.d.integer(1, 5)
    out = b.d.integer(1, 4) if v["projection"] else units
    _lstm_weights(b, t, v, n_in, units, out)
    _state(b, t, (batch, out))
    _state(b, t, (batch, units))
    _act(b, ACT)
    _clips(b, t)
    if len(b.sig.inputs) > 23:
        norm = b.d.flag(0.3)
        b.params["layer_norm"] = norm
        _layer_norm(b, t, v, units, norm)
    for _ in range(4):
        b.out(t, None)


@recipe(OT.UNIDIRECTIONAL_SEQUENCE_LSTM, "recurrent")
def unidirectional_sequence_lstm(b: Build) -> None:
    _sequence_lstm(b, 1)


def _sequence_lstm(b: Build, directions: int) -> None:
    """UNIDIRECTIONAL_SEQUENCE_LSTM (one direction) or BIDIRECTIONAL_SEQUENCE_LSTM (two, the auxiliary
    input omitted): each direction's weights, then each's states, then the scalars and layer norms."""
    time_major = b.d.flag(0.5)
    _, t, _, batch, n_in = _sequence(b, time_major)
    v = _lstm_variant(b)
    units = b.d.integer(1, 5 if directions == 1 else 4)
    out = b.d.integer(1, 4 if directions == 1 else 3) if v["projection"] else units
    for _ in range(directions):
        _lstm_weights(b, t, v, n_in, units, out)
    for _ in range(directions):
        _state(b, t, (batch, out))
        _state(b, t, (batch, units))
    if directions == 2:
        for _ in range(9):  # NOTE: the auxiliary input and its forward and backward weights
            b.omit()
    _act(b, ACT)
    _clips(b, t)
    if directions == 2:
        b.param("merge_outputs", T.BOOL, len(b.sig.outputs) in (1, 5))
    b.param("time_major", T.BOOL, time_major)
    norm = b.d.flag(0.3)
    b.params["layer_norm"] = norm
    for _ in range(directions):
        _layer_norm(b, t, v, units, norm)
    for _ in b.sig.outputs:
        b.out(t, None)


@recipe(OT.BIDIRECTIONAL_SEQUENCE_LSTM, "recurrent")
def bidirectional_sequence_lstm(b: Build) -> None:
    _sequence_lstm(b, 2)


def _quantized_input(b: Build, t: T, zp: int, max_size: int) -> tuple[int, int]:
    """Input 0 of a quantized LSTM, of the scale 1/128 and zero point it requires (an anchor of others
    replaced by a new input); its (batch, input size)."""
    x = b.main(t, ranks=(2,), fits=lambda d: d[1] <= max_size)
    o = b.operand(x)
    if (o.scale, o.zero_point) != (1.0 / 128, zp):
        if b.anchor == x:
            b.ins.pop()
            x = b.tensor(t, o.dims, scale=1.0 / 128, zp=zp, connect=False)
        else:
            o.scale, o.zero_point = 1.0 / 128, zp
    return b.operand(x).dims


@recipe(OT.QUANTIZED_16BIT_LSTM, "recurrent")
def quantized_16bit_lstm(b: Build) -> None:
    q8 = T.TENSOR_QUANT8_ASYMM
    batch, n_in = _quantized_input(b, q8, 128, 16)
    units = b.d.integer(1, 5)
    w_scale, w_zp = b.d.pick((1.0 / 256, 1.0 / 128, 1.0 / 64)), b.d.pick((128, 120, 135))
    rng = np.random.default_rng(b.d.seed())
    for dims in [(units, n_in)] * 4 + [(units, units)] * 4:
        w = np.clip(np.rint(rng.normal(w_zp, 30, dims)), 0, 255).astype(np.uint8)
        b.tensor(q8, dims, scale=w_scale, zp=w_zp, value=w, role="weight", connect=False)
    bias_scale = float(np.float32(w_scale / 128))
    for _ in range(4):
        b.tensor(T.TENSOR_INT32, (units,), scale=bias_scale, zp=0,
                 value=rng.integers(-2000, 2000, units).astype(np.int32), role="weight", connect=False)
    b.tensor(T.TENSOR_QUANT16_SYMM, (batch, units), scale=1.0 / 2048, zp=0,
             value=rng.integers(-4096, 4096, (batch, units)).astype(np.int16), connect=False)
    b.tensor(q8, (batch, units), scale=1.0 / 128, zp=128, connect=False)
    b.out(T.TENSOR_QUANT16_SYMM, (1.0 / 2048, 0))
    b.out(q8, (1.0 / 128, 128))


@recipe(OT.QUANTIZED_LSTM, "recurrent")
def quantized_lstm(b: Build) -> None:
    """The integer LSTM as the vectors' QUANTIZED_LSTM models build it (layer normalization on, biases of
    scale 0, cell state 2^-15): their quantization, random weights and sizes, CIFG and projection drawn."""
    s8, q8, q16 = T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_SYMM
    batch, n_in = _quantized_input(b, s8, 0, 8)
    cifg, projection = b.d.flag(0.3), b.d.flag(0.3)
    b.params.update({"cifg": cifg, "projection": projection})
    units = b.d.integer(1, 5)
    out = b.d.integer(1, 4) if projection else units
    rng = np.random.default_rng(b.d.seed())
    w_scale = b.d.pick((1.0 / 127.5, 1.0 / 255, 1.0 / 64))

    def weights(dims: tuple, scale: float = w_scale) -> None:
        b.tensor(q8, dims, scale=scale, zp=0, value=np.clip(np.rint(rng.normal(0, 50, dims)), -127, 127)
                 .astype(np.int8), role="weight", connect=False)

    for dims in ((units, n_in),) * 4 + ((units, out),) * 4:
        if cifg and dims in ((units, n_in), (units, out)) and len(b.ins) in (1, 5):
            b.omit()
        else:
            weights(dims)
    for _ in range(3):
        b.omit()  # NOTE: no peephole
    for gate in range(4):
        if gate == 0 and cifg:
            b.omit()
        else:
            b.tensor(T.TENSOR_INT32, (units,), scale=0.0, zp=0, value=rng.integers(-2 ** 23, 2 ** 23, units)
                     .astype(np.int32), role="weight", connect=False)
    if projection:
        weights((out, units), 1.0 / 255)
    else:
        b.omit()
    b.omit()  # NOTE: no projection bias
    state = 2.0 ** -15
    b.tensor(s8, (batch, out), scale=state, zp=0, connect=False)
    b.tensor(q16, (batch, units), scale=state, zp=0, value=rng.integers(-4096, 4096, (batch, units))
             .astype(np.int16), connect=False)
    for gate in range(4):
        if gate == 0 and cifg:
            b.omit()
        else:
            b.tensor(q16, (units,), scale=float(np.float32(3.05182e-05)), zp=0,
                     value=rng.integers(6000, 27000, units).astype(np.int16), role="weight", connect=False)
    b.param("cell_clip", T.FLOAT32, 0.0)
    b.param("projection_clip", T.FLOAT32, 0.0)
    for name, v in zip(("input_scale", "forget_scale", "cell_scale", "output_scale"),
                       (0.007059, 0.007812, 0.007059, 0.007812)):
        b.param(f"{name}", T.FLOAT32, v, record=False)
    b.param("hidden_zero_point", T.INT32, 0)
    b.param("hidden_scale", T.FLOAT32, 0.007)
    b.out(s8, (state, 0))
    b.out(q16, (state, 0))
    b.out(s8, (state, 0))
