#include "textflag.h"

// func skipPlainAVX2(b []byte, i int) int
//
// Returns the index of the first '"', '\\' or byte below 0x20 at or after i, or the first
// index from which fewer than 32 bytes remain (the caller finishes those).
TEXT ·skipPlainAVX2(SB), NOSPLIT, $0-40
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), BX
	MOVQ i+24(FP), AX
	MOVL $0x22, CX
	MOVQ CX, X1
	VPBROADCASTB X1, Y1          // '"'
	MOVL $0x5c, CX
	MOVQ CX, X2
	VPBROADCASTB X2, Y2          // '\\'
	MOVL $0x1f, CX
	MOVQ CX, X3
	VPBROADCASTB X3, Y3          // 0x1f: x <= 0x1f iff min(x, 0x1f) == x
	SUBQ $32, BX                 // last start of a full block
loop:
	CMPQ AX, BX
	JGT  tail
	VMOVDQU (SI)(AX*1), Y0
	VPCMPEQB Y0, Y1, Y4
	VPCMPEQB Y0, Y2, Y5
	VPMINUB Y0, Y3, Y6
	VPCMPEQB Y6, Y0, Y6
	VPOR Y4, Y5, Y4
	VPOR Y4, Y6, Y4
	VPMOVMSKB Y4, DX
	TESTL DX, DX
	JNZ  found
	ADDQ $32, AX
	JMP  loop
found:
	BSFL DX, DX
	ADDQ DX, AX
tail:
	VZEROUPPER
	MOVQ AX, ret+32(FP)
	RET

// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax, edx uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET
