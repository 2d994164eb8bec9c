'use strict';
// kiln's error classes, shared by the add-on's layer (index.js) and the wasm
// loader (wasm.js), which runs without the add-on.

/** kiln's errors: every one below is a KilnError. */
class KilnError extends Error {
  constructor(message) {
    super(message);
    this.name = new.target.name;
  }
}
/** The source does not parse (a located message: file:line:col). */
class ParseError extends KilnError {}
/** The graph does not verify, or the tier cannot compile it. */
class CompileError extends KilnError {}
/** A file cannot be read. */
class IoError extends KilnError {}
/** A run-time failure. */
class ExecError extends KilnError {}
/** Integer division (or remainder) by zero, naming the node. */
class DivisionByZeroError extends ExecError {}
/** An index (`gather`, `embedding`) outside its axis, naming the node. */
class IndexOutOfRangeError extends ExecError {}

const KINDS = {
  ParseError,
  CompileError,
  IoError,
  ExecError,
  DivisionByZeroError,
  IndexOutOfRangeError,
  TypeError,
  RangeError,
};

// The native module tags each error `KILN:<Kind>:`; this makes it that class.
function translate(e) {
  const m = e instanceof Error ? /^KILN:(\w+):/.exec(e.message) : null;
  if (!m || !KINDS[m[1]]) return e;
  return new KINDS[m[1]](e.message.slice(m[0].length));
}

module.exports = {
  KilnError,
  ParseError,
  CompileError,
  IoError,
  ExecError,
  DivisionByZeroError,
  IndexOutOfRangeError,
  KINDS,
  translate,
};
