"""What the CPU offers for bfloat16, read from `/proc/cpuinfo` (Linux) without TensorFlow."""

BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")
CPUINFO = "/proc/cpuinfo"


def cpu_flags(cpuinfo=None):
    """The feature flags of the first CPU in `cpuinfo` (a set), or None where the file is missing or has none.

    Example:
    >>> "avx2" in cpu_flags()
    True
    """
    try:
        with open(cpuinfo or CPUINFO, encoding="utf-8", errors="replace") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() == "flags":
                    return set(value.split())
    except OSError:
        return None
    return None


def bfloat16_note(cpuinfo=None):
    """One line saying that the CPU lacks native bfloat16 instructions (`BFLOAT16_FLAGS`), or None when it has
    them or its flags cannot be read (not Linux).

    Example:
    >>> bfloat16_note()  # on an AVX2-only CPU
    'this CPU has no native bfloat16 instructions (neither avx512_bf16 nor amx_bf16 in /proc/cpuinfo): ...'
    """
    flags = cpu_flags(cpuinfo)
    if flags is None or flags & set(BFLOAT16_FLAGS):
        return None
    return (
        f"this CPU has no native bfloat16 instructions (neither {' nor '.join(BFLOAT16_FLAGS)} in "
        f"{cpuinfo or CPUINFO}): bfloat16 is emulated, which was slower than float32 on such CPUs "
        "(docs/performance.md)"
    )
