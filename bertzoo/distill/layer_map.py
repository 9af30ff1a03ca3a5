"""Which teacher layer each student layer learns from (TinyBERT) or starts
from (DistilBERT initialisation). Layers are 0-based transformer layers;
hidden state 0 is the embedding output and hidden state i + 1 the output of
layer i."""

from bertzoo.errors import BertzooError


class DistillationError(BertzooError, ValueError):
    """A teacher/student pair or setting that cannot be distilled as asked."""


def _check_count(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DistillationError(f"{name} must be an integer >= 1, got {value!r}.")


def suggested_layer_map(teacher_layers, student_layers):
    """Student layer i <- teacher layer `ceil((i + 1) * N / M) - 1`: the end
    of each of M near-equal blocks (the uniform map when M divides N)."""
    return tuple(-(-(i + 1) * teacher_layers // student_layers) - 1 for i in range(student_layers))


def uniform_layer_map(teacher_layers, student_layers):
    """TinyBERT's uniform map for N teacher and M student layers, k = N / M:
    student layer i <- teacher layer `i * k + k - 1` (0-based), so the last
    student layer learns from the last teacher layer. M must divide N.

    >>> uniform_layer_map(12, 4)
    (2, 5, 8, 11)
    """
    _check_count("teacher_layers", teacher_layers)
    _check_count("student_layers", student_layers)
    if student_layers > teacher_layers:
        raise DistillationError(
            f"The student has more layers ({student_layers}) than the teacher ({teacher_layers})."
        )
    if teacher_layers % student_layers:
        raise DistillationError(
            f"The uniform layer map needs the teacher's {teacher_layers} layers to be a "
            f"multiple of the student's {student_layers}. Pass an explicit layer map "
            f"(teacher layer per student layer), e.g. "
            f"{','.join(str(i + 1) for i in suggested_layer_map(teacher_layers, student_layers))} "
            "(1-based on the command line)."
        )
    k = teacher_layers // student_layers
    return tuple(i * k + k - 1 for i in range(student_layers))


def check_layer_map(layer_map, teacher_layers, student_layers):
    """Validates an explicit map (one 0-based teacher layer per student
    layer, increasing) and returns it as a tuple."""
    _check_count("teacher_layers", teacher_layers)
    _check_count("student_layers", student_layers)
    layer_map = tuple(layer_map)
    if len(layer_map) != student_layers:
        raise DistillationError(
            f"The layer map has {len(layer_map)} entries; the student has {student_layers} "
            "layers and needs one teacher layer per student layer."
        )
    for i in layer_map:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < teacher_layers:
            raise DistillationError(
                f"Layer map entry {i!r} is not a teacher layer: valid are 0..{teacher_layers - 1} "
                "(0-based)."
            )
    if any(b <= a for a, b in zip(layer_map, layer_map[1:])):
        raise DistillationError(f"The layer map {list(layer_map)} must be strictly increasing.")
    return layer_map


def resolve_layer_map(layer_map, teacher_layers, student_layers):
    """The explicit `layer_map` when given, else the uniform map."""
    if layer_map is None:
        return uniform_layer_map(teacher_layers, student_layers)
    return check_layer_map(layer_map, teacher_layers, student_layers)


def init_layer_map(teacher_layers, student_layers):
    """DistilBERT's initialisation map generalised to any depths: M layers
    spread evenly over N including both ends, `round(j * (N - 1) / (M - 1))`
    (12 -> 6 gives the reference [0, 2, 4, 7, 9, 11]); one layer takes layer 0.
    """
    _check_count("teacher_layers", teacher_layers)
    _check_count("student_layers", student_layers)
    if student_layers > teacher_layers:
        raise DistillationError(
            f"The student has more layers ({student_layers}) than the teacher ({teacher_layers})."
        )
    if student_layers == 1:
        return (0,)
    # Half-up rounding (Python's round() rounds halves to even).
    return tuple(
        int(j * (teacher_layers - 1) / (student_layers - 1) + 0.5) for j in range(student_layers)
    )
