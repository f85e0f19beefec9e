package bpfprobe

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// builder assembles one program. Labels name the next emitted instruction;
// two labels on the same spot are separated by a no-op jump.
type builder struct {
	insns   asm.Instructions
	pending string
	n       int
}

func (b *builder) emit(ins ...asm.Instruction) {
	for _, in := range ins {
		if b.pending != "" {
			in = in.WithSymbol(b.pending)
			b.pending = ""
		}
		b.insns = append(b.insns, in)
	}
}

// newLabel returns a fresh label name.
func (b *builder) newLabel() string {
	b.n++
	return fmt.Sprintf("l%d", b.n)
}

// mark places label l on the next instruction.
func (b *builder) mark(l string) {
	if b.pending != "" {
		// ja +0: a no-op that carries the earlier label.
		b.emit(asm.Instruction{OpCode: asm.Ja.Op(asm.ImmSource), Offset: 0})
	}
	b.pending = l
}

const labelExit = "exit"

// finish appends "return 0" under labelExit and returns the program.
func (b *builder) finish() asm.Instructions {
	b.mark(labelExit)
	b.emit(asm.Mov.Imm(asm.R0, 0), asm.Return())
	return b.insns
}

// Stack slots (offsets from R10). Keys and values handed to map helpers
// live here; the verifier requires them initialised before each call.
const (
	slotTID  = -4  // u32 thread id key
	slotIdx  = -8  // u32 array index key
	slotStat = -12 // u32 index into the stats array
	slotVal  = -40 // 24 bytes: a map value of up to three u64
	slotVal1 = slotVal + 8
	slotVal2 = slotVal + 16
)

// call emits a helper call; R1-R5 and R0 are clobbered, R6-R9 kept.
func (b *builder) call(fn asm.BuiltinFunc) { b.emit(fn.Call()) }

// lookup emits R0 = map_lookup_elem(m, fp+key).
func (b *builder) lookup(m *ebpf.Map, key int16) {
	b.emit(
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(key)),
	)
	b.call(asm.FnMapLookupElem)
}

// update emits map_update_elem(m, fp+key, fp+val, BPF_ANY).
func (b *builder) update(m *ebpf.Map, key, val int16) {
	b.emit(
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(key)),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, int32(val)),
		asm.Mov.Imm(asm.R4, 0),
	)
	b.call(asm.FnMapUpdateElem)
}

// del emits map_delete_elem(m, fp+key).
func (b *builder) del(m *ebpf.Map, key int16) {
	b.emit(
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(key)),
	)
	b.call(asm.FnMapDeleteElem)
}

// filterTgid emits: if current tgid != tgid goto label. Clobbers R0-R5.
func (b *builder) filterTgid(tgid int32, label string) {
	b.call(asm.FnGetCurrentPidTgid)
	b.emit(
		asm.RSh.Imm(asm.R0, 32),
		asm.JNE.Imm(asm.R0, tgid, label),
	)
}

// addStat emits stats[idx] += src (src a register, or imm when src is
// asm.RFP, which is never a value).
func (b *builder) addStat(stats *ebpf.Map, idx int, src asm.Register, imm int32) {
	skip := b.newLabel()
	b.emit(asm.StoreImm(asm.RFP, slotStat, int64(idx), asm.Word))
	b.lookup(stats, slotStat)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, skip),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
	)
	if src == asm.RFP {
		b.emit(asm.Add.Imm(asm.R1, imm))
	} else {
		b.emit(asm.Add.Reg(asm.R1, src))
	}
	b.emit(asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord))
	b.mark(skip)
}

// maxStat emits stats[idx] = max(stats[idx], src).
func (b *builder) maxStat(stats *ebpf.Map, idx int, src asm.Register) {
	skip := b.newLabel()
	b.emit(asm.StoreImm(asm.RFP, slotStat, int64(idx), asm.Word))
	b.lookup(stats, slotStat)
	b.emit(
		asm.JEq.Imm(asm.R0, 0, skip),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.JGE.Reg(asm.R1, src, skip),
		asm.StoreMem(asm.R0, 0, src, asm.DWord),
	)
	b.mark(skip)
}

// log2 emits dst = floor(log2(src)) (0 for src 0) with an unrolled binary
// search; clobbers R1 and R2.
func (b *builder) log2(dst, src asm.Register) {
	b.emit(asm.Mov.Imm(dst, 0), asm.Mov.Reg(asm.R1, src))
	for _, s := range []int32{32, 16, 8, 4, 2, 1} {
		next := b.newLabel()
		b.emit(
			asm.Mov.Reg(asm.R2, asm.R1),
			asm.RSh.Imm(asm.R2, s),
			asm.JEq.Imm(asm.R2, 0, next),
			asm.Mov.Reg(asm.R1, asm.R2),
			asm.Add.Imm(dst, s),
		)
		b.mark(next)
	}
}

// loadSize maps a field size to an asm load size.
func loadSize(n int) asm.Size {
	if n == 8 {
		return asm.DWord
	}
	return asm.Word
}
