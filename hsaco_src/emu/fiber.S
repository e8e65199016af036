// Hand-rolled x86-64 SysV context switch for the lane fibers. glibc's
// swapcontext saves the signal mask with a system call on every switch; a
// kernel primitive costs 128 switches (64 lanes in, 64 out), so only what the
// ABI says is callee-saved moves here: rbx, rbp, r12-r15, rsp, and the control
// parts of MXCSR and the x87 control word.
//
// Saved frame, lowest address first (this is also what fiber.c builds for a
// fresh fiber): [mxcsr:4][x87cw:2][pad:2] r15 r14 r13 r12 rbx rbp ret

    .text
    .globl  hx_fiber_switch
    .hidden hx_fiber_switch
    .type   hx_fiber_switch, @function
// void hx_fiber_switch(void** save_sp /*rdi*/, void* load_sp /*rsi*/)
hx_fiber_switch:
    pushq   %rbp
    pushq   %rbx
    pushq   %r12
    pushq   %r13
    pushq   %r14
    pushq   %r15
    subq    $8, %rsp
    stmxcsr (%rsp)
    fnstcw  4(%rsp)
    movq    %rsp, (%rdi)
    movq    %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw   4(%rsp)
    addq    $8, %rsp
    popq    %r15
    popq    %r14
    popq    %r13
    popq    %r12
    popq    %rbx
    popq    %rbp
    ret
    .size   hx_fiber_switch, .-hx_fiber_switch

    .globl  hx_fiber_start
    .hidden hx_fiber_start
    .type   hx_fiber_start, @function
// First "return" of a fresh fiber: r12 = argument, r13 = entry(void*), which
// never returns (it switches away for good).
hx_fiber_start:
    movq    %r12, %rdi
    andq    $-16, %rsp
    callq   *%r13
    ud2
    .size   hx_fiber_start, .-hx_fiber_start

    .section .note.GNU-stack,"",@progbits
