package xdp

// The BPF object is compiled from bpf/bulwark.c by bpf2go (pinned as a tool
// in go.mod) with clang; the generated Go files and objects are committed,
// and TestGeneratedUpToDate regenerates them and fails on any difference
// when clang is installed.
//
//go:generate go tool bpf2go -tags linux -target bpfel,bpfeb -cflags "-O2 -g -Wall -Werror -mcpu=v3" -type counter -type event_kind -type flag -type list_bit -type summary_index -type s24_row -type s6_row -type event bulwark bpf/bulwark.c
