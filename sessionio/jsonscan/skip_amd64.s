#include "textflag.h"

// func skipPlainSIMD(b []byte, i int) int
//
// Returns the index of the first '"', '\\' or byte below 0x20 at or after i, or the first
// index from which fewer than 16 bytes remain (the caller finishes those). SSE2 only.
TEXT ·skipPlainSIMD(SB), NOSPLIT, $0-40
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), BX
	MOVQ i+24(FP), AX
	MOVL $0x22222222, CX
	MOVQ CX, X1
	PSHUFD $0, X1, X1            // '"' in every byte
	MOVL $0x5c5c5c5c, CX
	MOVQ CX, X2
	PSHUFD $0, X2, X2            // '\\'
	MOVL $0x1f1f1f1f, CX
	MOVQ CX, X3
	PSHUFD $0, X3, X3            // 0x1f: x <= 0x1f iff min(x, 0x1f) == x
	SUBQ $16, BX                 // last start of a full block
loop:
	CMPQ AX, BX
	JGT  done
	MOVOU (SI)(AX*1), X0
	MOVOU X0, X4
	PCMPEQB X1, X4
	MOVOU X0, X5
	PCMPEQB X2, X5
	MOVOU X0, X6
	PMINUB X3, X6
	PCMPEQB X0, X6
	POR X5, X4
	POR X6, X4
	PMOVMSKB X4, DX
	TESTL DX, DX
	JNZ  found
	ADDQ $16, AX
	JMP  loop
found:
	BSFL DX, DX
	ADDQ DX, AX
done:
	MOVQ AX, ret+32(FP)
	RET
