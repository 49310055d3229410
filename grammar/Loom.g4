// The grammar of Loom's schedule language (.sched files).
//
// ANTLR generates the lexer and parser from this file at build time; only
// grammar/parse_tree_to_ast.cpp sees the generated types. Statements end at a
// newline or ';'. Newlines inside (...) and [...] are skipped by the lexer so
// argument lists and lists may span lines; '{' ... '}' blocks do not nest that
// counter, so statements inside blocks still end at newlines.
grammar Loom;

@lexer::members {
  int open_brackets = 0;
}

program : sep* (stmt (sep+ stmt)*)? sep* EOF ;

// A lone expression: the text inside a string's `{...}` interpolation.
exprOnly : expr EOF ;

stmt
  : 'import' STRING                                     # importStmt
  | 'let' NAME '=' expr                                 # letStmt
  | NAME '=' expr                                       # assignStmt
  | ifClause                                            # ifStmt
  | 'for' NAME 'in' expr block                          # forStmt
  | 'def' NAME LPAREN (NAME (',' NAME)* ','?)? RPAREN block # defStmt
  | 'return' expr?                                      # returnStmt
  | expr                                                # exprStmt
  ;

ifClause : 'if' expr block (NEWLINE* 'else' (ifClause | block))? ;

block : LBRACE sep* (stmt (sep+ stmt)*)? sep* RBRACE ;

sep : NEWLINE | ';' ;

expr
  : primary                                             # primaryExpr
  | expr '.' NAME                                       # memberExpr
  | expr LPAREN (arg (',' arg)* ','?)? RPAREN           # callExpr
  | expr LBRACK expr RBRACK                             # indexExpr
  | op=MINUS expr                                        # unaryExpr
  | expr op=('*' | '/' | '//' | '%') expr               # binaryExpr
  | expr op=('+' | MINUS) expr                          # binaryExpr
  | expr op=('<' | '<=' | '>' | '>=' | '==' | '!=') expr  # binaryExpr
  | op=NOT expr                                         # unaryExpr
  | expr op='and' expr                                  # binaryExpr
  | expr op='or' expr                                   # binaryExpr
  ;

arg : (NAME '=')? expr ;

primary
  : INT                                                 # intLit
  | FLOAT                                               # floatLit
  | BYTES                                               # bytesLit
  | STRING                                              # stringLit
  | ('true' | 'false')                                  # boolLit
  | 'none'                                              # noneLit
  | 'auto'                                              # autoLit
  | NAME                                                # nameRef
  | LBRACK (expr (',' expr)* ','?)? RBRACK              # listLit
  | LPAREN expr RPAREN                                  # parenExpr
  ;

// Named so that the token checks compare types, not text.
LBRACE : '{' ;
RBRACE : '}' ;
MINUS : '-' ;
NOT : 'not' ;

LPAREN : '(' { open_brackets++; } ;
RPAREN : ')' { if (open_brackets > 0) open_brackets--; } ;
LBRACK : '[' { open_brackets++; } ;
RBRACK : ']' { if (open_brackets > 0) open_brackets--; } ;

// A byte size: an integer or decimal with a unit. KB/MB/GB/TB are powers of
// 1000, KiB/MiB/GiB/TiB powers of 1024.
BYTES : DIGITS ('.' DIGITS)? ('B' | 'KB' | 'MB' | 'GB' | 'TB' | 'KiB' | 'MiB' | 'GiB' | 'TiB') ;
FLOAT : DIGITS '.' DIGITS? EXPONENT? | '.' DIGITS EXPONENT? | DIGITS EXPONENT ;
INT : DIGITS ;
fragment DIGITS : [0-9] ('_'? [0-9])* ;
fragment EXPONENT : [eE] [+-]? [0-9]+ ;

STRING : '"' (~["\\\r\n] | '\\' ~[\r\n])* '"'
       | '\'' (~['\\\r\n] | '\\' ~[\r\n])* '\'' ;
// Matches only when the closing quote is missing (the rule above is longer
// otherwise); the parser reports it as an unterminated string.
UNTERMINATED_STRING : '"' (~["\\\r\n] | '\\' ~[\r\n])*
                    | '\'' (~['\\\r\n] | '\\' ~[\r\n])* ;

NAME : [a-zA-Z_] [a-zA-Z_0-9]* ;

NEWLINE : ('\r'? '\n' | '\r') { if (open_brackets > 0) skip(); } ;
COMMENT : '#' ~[\r\n]* -> channel(HIDDEN) ;
WS : [ \t\f]+ -> skip ;
LINE_CONTINUATION : '\\' [ \t]* ('\r'? '\n') -> skip ;

// Anything else becomes one token that the parser rejects with a located error.
UNEXPECTED_CHAR : . ;
