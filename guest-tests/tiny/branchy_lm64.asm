; branchy_lm64: branchy_pm32's workload in 64-bit long mode (same checksum and output).
%define RT_LONG_MODE 1
%include "../tiny/branchy_pm32.asm"
